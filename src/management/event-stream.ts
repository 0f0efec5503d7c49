/**
 * The dashboard's server-sent event stream: a `snapshot` event at once and then every interval. A client that does
 * not read is skipped (the stream's queue holds at most a few events), so a slow or stalled browser costs nothing
 * beyond its socket; the stream ends when the client goes away or the handler closes.
 */
import type { ActorSystem, Cancellable } from "../actor/index.ts";
import { dashboardOperations, dashboardSnapshot } from "./dashboard-snapshot.ts";
import type { OperatorLog } from "./operator-log.ts";

/** Events queued for a client before later ones are skipped. */
const queuedEventsMax = 4;

/** A `text/event-stream` Response whose stream is registered in `open` until it ends. */
export function eventStream(
  system: ActorSystem,
  operatorLog: OperatorLog,
  intervalMs: number,
  open: Set<{ close(): void }>,
  signal: AbortSignal,
): Response {
  const encoder = new TextEncoder();
  let timer: Cancellable | null = null;
  let closed = false;
  let controller: ReadableStreamDefaultController<Uint8Array>;
  const entry = {
    close(): void {
      if (closed) return;
      closed = true;
      timer?.cancel();
      open.delete(entry);
      try {
        controller.close();
      } catch {
        // Already closed or errored by the client going away.
      }
    },
  };
  /** One send; a failure to build a snapshot ends this stream (the client reconnects), never the process. */
  const sendNow = (): void => {
    send().catch(() => entry.close());
  };
  const send = async (): Promise<void> => {
    if (closed) return;
    if ((controller.desiredSize ?? 0) > 0) {
      // The projections and the outbox come from the database: read them first (the next send waits for this one).
      const operations = await dashboardOperations(system);
      if (closed) return;
      const data = JSON.stringify(dashboardSnapshot(system, operatorLog, operations));
      controller.enqueue(encoder.encode(`event: snapshot\ndata: ${data}\n\n`));
    }
    timer = system.scheduler.scheduleOnce(intervalMs, sendNow);
  };
  const stream = new ReadableStream<Uint8Array>(
    {
      start(c) {
        controller = c;
        open.add(entry);
        c.enqueue(encoder.encode(`retry: ${intervalMs * 2}\n\n`));
        sendNow();
      },
      cancel() {
        entry.close();
      },
    },
    { highWaterMark: queuedEventsMax, size: () => 1 },
  );
  if (signal.aborted) entry.close();
  else signal.addEventListener("abort", () => entry.close(), { once: true });
  return new Response(stream, {
    headers: {
      "content-type": "text/event-stream; charset=utf-8",
      "cache-control": "no-store",
      "x-accel-buffering": "no",
    },
  });
}
