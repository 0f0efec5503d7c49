// The seed's persistent Order example, shared by every demo node: an event-sourced entity on PostgreSQL, its
// commands, its event and its replies.
import { type EntityContext, EventSourcedBehavior, EventSourcedEffect } from "../../src/persistence/index.ts";
import { MessageRegistry } from "../../src/remote/index.ts";

/** The entity's message type (its runtime identity for `registerEntity`). */
export abstract class OrderCommand {}

/** Adds parcel number `seq` to an order; the sender gets a {@link DeliveryAck} once the event is committed. */
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

/** The reply to {@link GetOrder}: the parcels in the order's persisted state, where it runs, and its shard epoch. */
export class OrderReply {
  constructor(
    readonly parcels: string[],
    readonly host: string,
    readonly epoch: number,
  ) {}
}

/** Confirms that parcel `seq` is committed (a retried delivery is acknowledged again, never applied twice). */
export class DeliveryAck {
  constructor(readonly seq: number) {}
}

/** The order's only event: one parcel was added. */
export class ParcelAdded {
  constructor(
    readonly parcel: string,
    readonly seq: number,
  ) {}
}

/** An order's state: the fold of its ParcelAdded events. */
export interface OrderState {
  parcels: string[];
  lastSeq: number;
}

MessageRegistry.register(DeliverOrder, { name: "demo.DeliverOrder" });
MessageRegistry.register(GetOrder, { name: "demo.GetOrder" });
MessageRegistry.register(OrderReply, { name: "demo.OrderReply" });
MessageRegistry.register(DeliveryAck, { name: "demo.DeliveryAck" });

/** One event-sourced order: each parcel is persisted once, in sequence, and acknowledged after the commit. */
export class OrderBehavior extends EventSourcedBehavior<OrderCommand, ParcelAdded, OrderState> {
  emptyState(): OrderState {
    return { parcels: [], lastSeq: 0 };
  }

  applyEvent(state: OrderState, event: ParcelAdded): OrderState {
    return { parcels: [...state.parcels, event.parcel], lastSeq: event.seq };
  }

  handleCommand(
    state: OrderState,
    command: OrderCommand,
    context: EntityContext<OrderCommand>,
  ): EventSourcedEffect<ParcelAdded, OrderState> {
    if (command instanceof DeliverOrder) {
      const ack = () => context.sender?.tell(new DeliveryAck(command.seq));
      // Already in the state: the earlier ack was lost on the way back, so acknowledge again without a write.
      if (command.seq <= state.lastSeq) return EventSourcedEffect.none<ParcelAdded, OrderState>().thenRun(ack);
      // The OperationId is derived from order id + seq, so a retry whose first attempt did commit is recognised
      // by the store as a duplicate instead of adding the parcel twice.
      const op = `${context.entityId.id}:parcel-${command.seq}`;
      return EventSourcedEffect.persist<ParcelAdded, OrderState>(
        new ParcelAdded(command.parcel, command.seq),
        op,
      ).thenRun(ack);
    }
    return EventSourcedEffect.none<ParcelAdded, OrderState>().thenRun((s) =>
      context.sender?.tell(
        new OrderReply([...s.parcels], context.system.address.toString(), context.fence?.epoch ?? 0),
      ),
    );
  }
}
