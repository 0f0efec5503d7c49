import { randomFillSync } from "node:crypto";

/** Random bits in every ask reply actor's name (docs/protocol.md §3.6: unguessable reply endpoints). */
export const replyNameBits = 128;

const nameBytes = replyNameBits / 8;
/** Bytes drawn from the CSPRNG at once: one system call per 256 names instead of one per name. */
const poolBytes = 4096;

/**
 * Names for the reply actors of asks (`/temp/<name>`). A reply reaches an ask by that name alone, also from other
 * nodes, so each name is 128 fresh bits from the operating system's CSPRNG: knowing any number of other names (a peer
 * sees the ones of the asks sent to it) tells nothing about the next, and a peer cannot complete an ask it was not
 * sent by guessing. The bytes are drawn in 4 KiB batches because asks are a hot path (about 0.2 µs per name, where a
 * `randomBytes(16)` call each costs microseconds).
 */
export class ReplyNames {
  private readonly pool = Buffer.allocUnsafe(poolBytes);
  private offset = poolBytes;

  /** A fresh name: `$` and 22 base64url characters (128 random bits); never reused bytes. */
  next(): string {
    if (this.offset === poolBytes) {
      randomFillSync(this.pool);
      this.offset = 0;
    }
    const start = this.offset;
    this.offset = start + nameBytes;
    return `$${this.pool.toString("base64url", start, start + nameBytes)}`;
  }
}
