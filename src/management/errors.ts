/** Raised by `startManagement` / `createManagementHandler` for invalid options (names the option). */
export class ManagementConfigurationError extends Error {
  override readonly name = "ManagementConfigurationError";
  constructor(
    readonly option: string,
    message: string,
  ) {
    super(`management option ${option}: ${message}`);
  }
}

/**
 * A request the management endpoint refuses: the HTTP status and a stable `code` the JSON body carries
 * (`{ "error": code, "message": ... }`), so scripts can tell refusals apart without parsing messages.
 */
export class ManagementRequestError extends Error {
  override readonly name = "ManagementRequestError";
  constructor(
    readonly status: number,
    readonly code: string,
    message: string,
    /** More fields of the JSON body, built by the endpoint itself (never from request data as keys). */
    readonly details: Readonly<Record<string, string | number | boolean | null>> = {},
  ) {
    super(message);
  }
}
