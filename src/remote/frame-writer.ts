/** Where a {@link FrameWriter} sends its batches (a `net.Socket` or `tls.TLSSocket`). */
export interface WritableSink {
  /** Takes `chunk`; calls `written` once the bytes are no longer needed (sent, or dropped with the socket). */
  write(chunk: Buffer, written?: (error?: Error | null) => void): boolean;
  readonly writableLength: number;
  cork?(): void;
  uncork?(): void;
}

/** Counters a writer bumps. */
export interface WriteCounters {
  writes: number;
  framesOut: number;
  bytesOut: number;
}

/** Size of one output chunk; frames are packed into it and it is flushed at the latest when full (docs/protocol.md §3.1: ~64 KiB per write). */
export const writeChunkBytes = 64 * 1024;

/**
 * Unflushed bytes at which a commit writes at once instead of waiting for the microtask: nearly a whole chunk, so a
 * burst costs one syscall per ~60 KiB (half a chunk doubled the syscalls and showed in profiles of the sender).
 */
const flushAtBytes = writeChunkBytes - 4096;

/**
 * Whole chunks whose bytes every socket is done with, kept for the next writer that needs a chunk. A fresh 64 KiB
 * buffer per chunk cost page faults and garbage collection in sender profiles; a busy link cycles through two or
 * three. Shared by all writers of the process and bounded.
 */
const freeChunks: Buffer[] = [];
/** Most chunks kept for reuse (1 MiB). */
const freeChunksMax = 16;

/** @internal Chunks waiting for reuse (tests). */
export function freeChunkCount(): number {
  return freeChunks.length;
}

function takeChunk(bytes: number): Buffer {
  if (bytes <= writeChunkBytes) return freeChunks.pop() ?? Buffer.allocUnsafe(writeChunkBytes);
  return Buffer.allocUnsafe(bytes);
}

/** One output chunk and how many of its pieces a socket still holds; reused once retired and all were written. */
class OutputChunk {
  /** Pieces handed to a sink whose `written` callback has not come yet. */
  private unwritten = 0;
  private retired = false;
  /** Passed with every piece of this chunk to the sink. */
  readonly written = (): void => {
    if (--this.unwritten === 0 && this.retired) this.recycle();
  };

  constructor(readonly bytes: Buffer) {}

  /** A piece of this chunk goes to a sink. */
  handedOut(): void {
    this.unwritten++;
  }

  /** The writer moved on to another chunk; this one is reused as soon as the sink is done with it. */
  retire(): void {
    this.retired = true;
    if (this.unwritten === 0) this.recycle();
  }

  private recycle(): void {
    if (this.bytes.length === writeChunkBytes && freeChunks.length < freeChunksMax) freeChunks.push(this.bytes);
  }
}

/**
 * Packs many frames into one socket write. Frames are encoded straight into a shared chunk; the chunk's filled part
 * is written when it would overflow, or on the microtask after the first unflushed frame, so a burst of tells inside
 * one dispatcher turn goes out in one `write`. Written bytes are never reused (the socket may still hold them): after
 * a flush the writer continues behind them in the same chunk, and takes a fresh chunk only when that one is full.
 * Without a sink (while the connection is being set up) frames accumulate; {@link FrameWriter.discard} drops them.
 */
export class FrameWriter {
  private current = new OutputChunk(takeChunk(writeChunkBytes));
  private chunk: Buffer = this.current.bytes;
  private start = 0;
  private used = 0;
  private held: Buffer[] = [];
  /** The chunk each piece of {@link held} belongs to. */
  private heldChunks: OutputChunk[] = [];
  private heldBytes = 0;
  private unflushedFrames = 0;
  private heldFrames = 0;
  private flushQueued = false;
  private sink: WritableSink | null = null;
  /** Frames this writer handed to its socket so far (counted per write, not per frame; idle expiry reads it). */
  framesFlushed = 0;
  private readonly flushTask = (): void => {
    this.flushQueued = false;
    this.flush();
  };

  /** `counters` is bumped on every socket write (shared by all writers of one node). */
  constructor(private readonly counters: WriteCounters = { writes: 0, framesOut: 0, bytesOut: 0 }) {}

  /** Frames and bytes accepted but not yet handed to a socket. */
  get pendingFrames(): number {
    return this.unflushedFrames + this.heldFrames;
  }

  /** Bytes waiting here or in the socket's own buffer; callers refuse new work above a bound (backpressure). */
  get bufferedBytes(): number {
    return this.used - this.start + this.heldBytes + (this.sink?.writableLength ?? 0);
  }

  /** Starts writing to `sink` (everything accumulated so far goes first). */
  attach(sink: WritableSink): void {
    this.sink = sink;
    this.scheduleFlush();
  }

  /** Stops writing; returns the number of frames dropped (accepted but never handed to a socket). */
  discard(): number {
    const dropped = this.pendingFrames;
    this.sink = null;
    // Pieces never handed to a sink keep their chunks out of reuse; the garbage collector takes them.
    this.held = [];
    this.heldChunks = [];
    this.heldBytes = 0;
    this.heldFrames = 0;
    this.unflushedFrames = 0;
    this.start = this.used;
    return dropped;
  }

  /**
   * Returns a buffer and offset with at least `bytes` free; write the frame there and call {@link commit} with its end.
   */
  reserve(bytes: number): Buffer {
    if (this.chunk.length - this.used < bytes) {
      this.retireChunk();
      this.current.retire();
      this.current = new OutputChunk(takeChunk(bytes));
      this.chunk = this.current.bytes;
      this.start = 0;
      this.used = 0;
    }
    return this.chunk;
  }

  /** Offset where the next reserved frame starts. */
  get offset(): number {
    return this.used;
  }

  /** Accepts the frame written between {@link offset} and `end`. */
  commit(end: number): void {
    this.used = end;
    this.unflushedFrames++;
    if (this.used - this.start >= flushAtBytes) this.flush();
    else this.scheduleFlush();
  }

  /** Appends an already framed buffer (control frames). */
  writeFrame(frame: Buffer): void {
    const buf = this.reserve(frame.length);
    frame.copy(buf, this.used);
    this.commit(this.used + frame.length);
  }

  /** Hands everything accepted to the socket now (no-op without a sink). */
  flush(): void {
    if (this.sink === null) return;
    this.retireChunk();
    if (this.held.length === 0) return;
    const held = this.held;
    const owners = this.heldChunks;
    this.counters.writes++;
    this.counters.framesOut += this.heldFrames;
    this.framesFlushed += this.heldFrames;
    this.counters.bytesOut += this.heldBytes;
    this.held = [];
    this.heldChunks = [];
    this.heldBytes = 0;
    this.heldFrames = 0;
    if (held.length === 1) {
      this.sink.write(held[0]!, owners[0]!.written);
      return;
    }
    // Several pieces (a chunk boundary was crossed): one vectored write instead of copying them together.
    this.sink.cork?.();
    for (let i = 0; i < held.length; i++) this.sink.write(held[i]!, owners[i]!.written);
    this.sink.uncork?.();
  }

  private retireChunk(): void {
    if (this.used > this.start) {
      this.held.push(this.chunk.subarray(this.start, this.used));
      this.heldChunks.push(this.current);
      this.current.handedOut();
      this.heldBytes += this.used - this.start;
      this.heldFrames += this.unflushedFrames;
      this.unflushedFrames = 0;
      this.start = this.used;
    }
  }

  private scheduleFlush(): void {
    if (this.flushQueued || this.sink === null) return;
    this.flushQueued = true;
    queueMicrotask(this.flushTask);
  }
}
