// The seed's Order example, shared by every demo node: the entity's commands, its replies and its behavior.
import { AbstractBehavior, type ActorContext } from "../../src/index.ts";
import { MessageRegistry } from "../../src/remote/index.ts";

/** The entity's message type (its runtime identity for `sharding.init`). */
export abstract class OrderCommand {}

/** Adds parcel number `seq` to an order; the sender gets a {@link DeliveryAck}. */
export class DeliverOrder extends OrderCommand {
  constructor(
    readonly parcel: string,
    readonly seq: number,
  ) {
    super();
  }
}

/** Asks for the order's parcels. */
export class GetOrder extends OrderCommand {}

/** The reply to {@link GetOrder}: what this actor instance holds and where it runs. */
export class OrderReply {
  constructor(
    readonly parcels: string[],
    readonly host: string,
  ) {}
}

/** Confirms that parcel `seq` was applied (or had already been: a retried delivery is acknowledged again). */
export class DeliveryAck {
  constructor(readonly seq: number) {}
}

MessageRegistry.register(DeliverOrder, { name: "demo.DeliverOrder" });
MessageRegistry.register(GetOrder, { name: "demo.GetOrder" });
MessageRegistry.register(OrderReply, { name: "demo.OrderReply" });
MessageRegistry.register(DeliveryAck, { name: "demo.DeliveryAck" });

/**
 * What one node saw of each order across every actor instance it hosted. An ordinary entity keeps its state in
 * memory, so a moved order starts empty on its new node; the ledger is how the demo proves nothing was lost.
 */
export class DeliveryLedger {
  /** Per order, the parcel numbers applied on this node, in arrival order. */
  readonly seqs = new Map<string, number[]>();
  delivered = 0;

  record(orderId: string, seq: number): void {
    let list = this.seqs.get(orderId);
    if (list === undefined) this.seqs.set(orderId, (list = []));
    list.push(seq);
    this.delivered++;
  }

  toJSON(): Record<string, number[]> {
    return Object.fromEntries(this.seqs);
  }
}

/** One order entity: applies each parcel once, in sequence, and acknowledges it. */
export class OrderBehavior extends AbstractBehavior<OrderCommand> {
  private readonly parcels: string[] = [];
  private lastSeq = 0;

  constructor(
    readonly entityId: string,
    private readonly ledger?: DeliveryLedger,
  ) {
    super();
  }

  receive(message: OrderCommand, context: ActorContext<OrderCommand>): void {
    if (message instanceof DeliverOrder) {
      // A retry of a parcel this instance already applied is acknowledged again but not applied twice.
      if (message.seq > this.lastSeq) {
        this.lastSeq = message.seq;
        this.parcels.push(message.parcel);
        this.ledger?.record(this.entityId, message.seq);
      }
      context.sender?.tell(new DeliveryAck(message.seq));
    } else if (message instanceof GetOrder) {
      context.sender?.tell(new OrderReply([...this.parcels], context.system.address.toString()));
    }
  }
}
