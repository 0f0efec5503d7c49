import type { ActorRef } from "../../actor/index.ts";
import type { ShardingEnvelope } from "../coordinator/messages.ts";

/** One accepted routed message on its way: the envelope, the sender to reply to, and the typed value. */
export interface Delivery {
  readonly envelope: ShardingEnvelope;
  readonly sender: ActorRef<unknown> | null;
  readonly typed: unknown;
}
