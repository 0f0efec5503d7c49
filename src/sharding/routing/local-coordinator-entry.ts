import { type ActorRef, InvalidMessageError } from "../../actor/index.ts";

/** A caller's entry to the coordinator logic on this node: `tell` runs it synchronously (the routing "mutex"). */
export class LocalCoordinatorEntry implements ActorRef<unknown> {
  constructor(
    private readonly daemon: ActorRef<unknown>,
    private readonly handle: (message: unknown, sender: ActorRef<unknown> | null) => void,
  ) {}
  get path() {
    return this.daemon.path;
  }
  tell(message: unknown, sender?: ActorRef<unknown> | null): void {
    this.handle(message, sender ?? null);
  }
  ask<R>(): Promise<R> {
    return Promise.reject(new InvalidMessageError("use askVia"));
  }
  sendSystem(): void {}
}
