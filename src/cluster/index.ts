/** Placeholder: this layer lands in its own issue. */
export {};
