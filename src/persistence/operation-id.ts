import { randomUUID } from "node:crypto";
import { InvalidPersistenceRequestError } from "./errors.ts";

/**
 * Names one write so that a retry after an ambiguous failure is recognised: the same id with the same content returns
 * the original result marked duplicate, the same id with other content is an OperationConflictError (docs/protocol.md §13.1).
 */
export class OperationId {
  private constructor(readonly value: string) {}

  /**
   * An id from caller-chosen text (a request id, a message id), at most 200 characters.
   * @throws InvalidPersistenceRequestError for an empty or over-long value
   */
  static of(value: string): OperationId {
    if (typeof value !== "string" || value.length === 0) {
      throw new InvalidPersistenceRequestError("operationId", "must be a non-empty string (use OperationId.random())");
    }
    if (value.length > 200) {
      throw new InvalidPersistenceRequestError("operationId", `${value.length} characters; at most 200 allowed`);
    }
    return new OperationId(value);
  }

  /** A fresh random UUID id. */
  static random(): OperationId {
    return new OperationId(randomUUID());
  }

  /**
   * Accepts an OperationId or its text.
   * @throws InvalidPersistenceRequestError when missing or empty
   */
  static from(value: OperationId | string): OperationId {
    if (value instanceof OperationId) return value;
    if (value === undefined || value === null) {
      throw new InvalidPersistenceRequestError("operationId", "is mandatory for every persisted write");
    }
    return OperationId.of(value);
  }

  /** The id's text. */
  toString(): string {
    return this.value;
  }
  /** The id's text, so JSON carries it. */
  toJSON(): string {
    return this.value;
  }
}
