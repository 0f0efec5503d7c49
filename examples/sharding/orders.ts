// The seed's persistent Order example, shared by every demo node: an event-sourced entity on PostgreSQL, its
// commands, its event and its replies; and a second entity type, Stock, in which each parcel reserves one item
// through the fenced outbox (docs/outbox.md): the order's ParcelAdded event and its ReserveStock message commit in one
// transaction under the order's shard fence, a dispatcher delivers the message through sharding until Stock
// acknowledges it, and Stock persists with the outbox message id as its OperationId, so a redelivery (after a lost
// acknowledgement, a crash or a handoff of either shard) is a duplicate and each parcel is reserved exactly once.
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

/** The SKU parcel `seq` of order `orderId` reserves: spread over {@link demoSkus} SKUs, so each Stock serves many orders. */
export const demoSkus = 8;
export function skuFor(orderId: string, seq: number): string {
  const n = Number(/([0-9]+)$/.exec(orderId)?.[1] ?? "0");
  return `sku-${(n + seq) % demoSkus}`;
}

/** Stock's message type (its runtime identity for `registerEntity`). */
export abstract class StockCommand {}

/**
 * Reserves one item for parcel `seq` of `order`; sent by the order through the outbox. It carries its outbox message
 * id: the same on every redelivery, so Stock uses it as its OperationId.
 */
export class ReserveStock extends StockCommand {
  constructor(
    readonly order: string,
    readonly seq: number,
    readonly messageId: string,
  ) {
    super();
  }
}

/** Asks a Stock for its reservations. */
export class GetStock extends StockCommand {}

/** Stock's answer to both: its reservations (`order:seq`), in the order they were made. */
export class StockReply {
  constructor(readonly reservations: string[]) {}
}

/** Stock's only event: one parcel's item is reserved. */
export class StockReserved {
  constructor(
    readonly order: string,
    readonly seq: number,
  ) {}
}

export interface StockState {
  reservations: string[];
}

MessageRegistry.register(DeliverOrder, { name: "demo.DeliverOrder" });
MessageRegistry.register(ReserveStock, { name: "demo.ReserveStock" });
MessageRegistry.register(GetStock, { name: "demo.GetStock" });
MessageRegistry.register(StockReply, { name: "demo.StockReply" });
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
      // by the store as a duplicate instead of adding the parcel twice (nor writing its outbox message twice).
      const orderId = context.entityId.id;
      const op = `${orderId}:parcel-${command.seq}`;
      return EventSourcedEffect.persist<ParcelAdded, OrderState>(new ParcelAdded(command.parcel, command.seq), op)
        .thenSend(
          "Stock",
          skuFor(orderId, command.seq),
          (messageId) => new ReserveStock(orderId, command.seq, messageId),
        )
        .thenRun(ack);
    }
    return EventSourcedEffect.none<ParcelAdded, OrderState>().thenRun((s) =>
      context.sender?.tell(
        new OrderReply([...s.parcels], context.system.address.toString(), context.fence?.epoch ?? 0),
      ),
    );
  }
}

/** One SKU's stock: each ReserveStock is persisted once, under its outbox message id, and answered after the commit. */
export class StockBehavior extends EventSourcedBehavior<StockCommand, StockReserved, StockState> {
  emptyState(): StockState {
    return { reservations: [] };
  }

  applyEvent(state: StockState, event: StockReserved): StockState {
    return { reservations: [...state.reservations, `${event.order}:${event.seq}`] };
  }

  handleCommand(
    _state: StockState,
    command: StockCommand,
    context: EntityContext<StockCommand>,
  ): EventSourcedEffect<StockReserved, StockState> {
    const reply = (s: StockState) => context.sender?.tell(new StockReply([...s.reservations]));
    if (command instanceof ReserveStock) {
      // The outbox message id as OperationId and an event made from the message alone: a redelivery writes the same
      // content under the same id, so the store answers "duplicate", nothing is added, and the reply acknowledges it.
      return EventSourcedEffect.persist<StockReserved, StockState>(
        new StockReserved(command.order, command.seq),
        command.messageId,
      ).thenRun(reply);
    }
    return EventSourcedEffect.none<StockReserved, StockState>().thenRun(reply);
  }
}
