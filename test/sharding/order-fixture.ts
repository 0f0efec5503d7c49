import { AbstractBehavior, type ActorContext } from "../../src/actor/index.ts";

/** The seed's Order example: an entity that collects parcels and reports them. */
export abstract class OrderCommand {}
export class DeliverOrder extends OrderCommand {
  constructor(readonly parcel: string) {
    super();
  }
}
export class GetOrder extends OrderCommand {}
export class FailOrder extends OrderCommand {}
export class SlowOrder extends OrderCommand {
  constructor(readonly neverReply = true) {
    super();
  }
}
export class WhoSent extends OrderCommand {}
export class OrderReply {
  constructor(
    readonly entityId: string,
    readonly parcels: string[],
    readonly host: string,
  ) {}
}
export class SenderReply {
  constructor(readonly senderPath: string | null) {}
}

/** Counts entity starts per node (tests read it to prove activation happens once, on the owner). */
export const started: string[] = [];

export class OrderBehavior extends AbstractBehavior<OrderCommand> {
  private readonly parcels: string[] = [];
  constructor(readonly entityId: string) {
    super();
  }
  override preStart(context: ActorContext<OrderCommand>): void {
    started.push(`${context.system.name}:${this.entityId}`);
  }
  receive(message: OrderCommand, context: ActorContext<OrderCommand>): void {
    if (message instanceof DeliverOrder) this.parcels.push(message.parcel);
    else if (message instanceof GetOrder)
      context.sender?.tell(new OrderReply(this.entityId, [...this.parcels], context.system.name));
    else if (message instanceof FailOrder) throw new Error(`order ${this.entityId} refused`);
    else if (message instanceof WhoSent) context.sender?.tell(new SenderReply(context.sender?.path.toString() ?? null));
  }
}

export const orderClasses = [DeliverOrder, GetOrder, FailOrder, SlowOrder, WhoSent, OrderReply, SenderReply];
