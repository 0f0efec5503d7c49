/** Errors of the cluster singleton layer. */

/** A singleton's settings are invalid, or a second `init` of the same name disagrees with the first. */
export class ClusterSingletonConfigurationError extends Error {
  override readonly name = "ClusterSingletonConfigurationError";
  /**
   * @param singletonName the singleton's name as given to `init`
   * @param field the setting that is wrong (`roles`, `activationInterval`, …)
   * @param detail what is wrong and what to change
   */
  constructor(
    readonly singletonName: string,
    readonly field: string,
    detail: string,
  ) {
    super(`Cluster singleton ${singletonName}: ${detail}`);
  }
}
