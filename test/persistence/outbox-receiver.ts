// The receiver of the outbox kill test: a "reserve" handler that appends one event to Stock:<sku> with the outbox
// message id as its OperationId (a redelivery is a duplicate there), then waits `ackDelayMs` before acknowledging.
import type { OutboxDeliverer, PersistenceStore } from "../../src/persistence/index.ts";

export function reserveHandler(store: PersistenceStore, ackDelayMs: number): OutboxDeliverer {
  return async (delivery) => {
    const sku = (delivery.message as { sku?: unknown }).sku;
    if (typeof sku !== "string") throw new Error("a reservation names its sku");
    const pid = `Stock:${sku}`;
    await store.appendEvents({
      persistenceId: pid,
      expectedRevision: await store.loadRevision(pid),
      operationId: delivery.messageId,
      events: [{ manifest: "json", payload: JSON.stringify({ reservedBy: delivery.senderPersistenceId }) }],
    });
    await new Promise((resolve) => setTimeout(resolve, ackDelayMs));
  };
}
