import assert from "node:assert/strict";
import { test } from "node:test";
import { FrameDecoder } from "../../src/remote/frame.ts";
import { FrameWriter, freeChunkCount, type WritableSink, writeChunkBytes } from "../../src/remote/frame-writer.ts";

/** A sink that keeps every piece with a copy taken when it was handed over, and its `written` callback. */
class RecordingSink implements WritableSink {
  readonly pieces: { piece: Buffer; copy: Buffer; written: (() => void) | undefined }[] = [];
  readonly writableLength = 0;
  write(chunk: Buffer, written?: (error?: Error | null) => void): boolean {
    this.pieces.push({
      piece: chunk,
      copy: Buffer.from(chunk),
      written: written === undefined ? undefined : () => written(),
    });
    return true;
  }
  cork(): void {}
  uncork(): void {}
  /** The bytes as they were handed over, in write order (what reached the socket). */
  copiesInOrder(): Buffer[] {
    return this.pieces.map((p) => p.copy);
  }
}

/** Writes frame number `n` (a 4-byte length, then `size` bytes all equal to n % 251) through `writer`. */
function writeNumbered(writer: FrameWriter, n: number, size: number): void {
  const buf = writer.reserve(4 + size);
  const at = writer.offset;
  buf.writeUInt32BE(size, at);
  buf.fill(n % 251, at + 4, at + 4 + size);
  writer.commit(at + 4 + size);
}

test("a chunk is reused only after the socket called back for every piece of it, and bytes in flight never change", () => {
  const sink = new RecordingSink();
  const writer = new FrameWriter();
  writer.attach(sink);
  const frameSize = 1000;
  // A little over three chunks of frames, flushed every 7 frames (as microtask flushes would cut them).
  const total = Math.ceil((3.2 * writeChunkBytes) / (frameSize + 4));
  const pooledBefore = freeChunkCount();
  for (let n = 0; n < total; n++) {
    writeNumbered(writer, n, frameSize);
    if (n % 7 === 6) writer.flush();
  }
  writer.flush();
  // Nothing was called back yet: no chunk may have been returned for reuse, so none was written over.
  assert.equal(freeChunkCount(), pooledBefore, "chunks were recycled while the socket still held their bytes");
  for (const { piece, copy } of sink.pieces) assert.ok(piece.equals(copy), "a piece changed while in flight");
  // Call back in a scrambled order, and go on writing through a second writer in between: it takes recycled chunks.
  const other = new FrameWriter();
  const otherSink = new RecordingSink();
  other.attach(otherSink);
  const order = sink.pieces.map((_, i) => i).sort((a, b) => ((a * 7919) % 13) - ((b * 7919) % 13) || a - b);
  let written = 0;
  for (const i of order) {
    const { piece, copy, written: callback } = sink.pieces[i]!;
    assert.ok(piece.equals(copy), `piece ${i} changed before its callback (${written} called back so far)`);
    callback!();
    written++;
    for (let k = 0; k < 40; k++) writeNumbered(other, 100_000 + written * 40 + k, frameSize);
    other.flush();
    // The pieces still in flight keep their bytes even though recycled chunks are being written over.
    for (const j of order.slice(written)) {
      assert.ok(sink.pieces[j]!.piece.equals(sink.pieces[j]!.copy), `piece ${j} changed while in flight`);
    }
  }
  // Whatever was written, the stream still decodes to the frames in order.
  const frames = new FrameDecoder().push(Buffer.concat(sink.copiesInOrder()));
  assert.equal(frames.length, total);
  for (const [n, frame] of frames.entries()) {
    assert.ok(
      frame.every((byte) => byte === n % 251),
      `frame ${n} is corrupt`,
    );
  }
});

test("retired chunks go back to the shared pool once written, up to its bound", () => {
  const sink = new RecordingSink();
  const writer = new FrameWriter();
  writer.attach(sink);
  const before = freeChunkCount();
  for (let n = 0; n < 200; n++) {
    writeNumbered(writer, n, 4000);
    writer.flush();
  }
  for (const { written } of sink.pieces) written!();
  // 200 × 4 KiB spans 13 chunks; all but the one still being filled are retired and written.
  const recycled = freeChunkCount() - before;
  assert.ok(recycled >= 1 && recycled <= 16, `recycled ${recycled} chunks`);
  assert.ok(freeChunkCount() <= 16, "the pool is bounded");
});
