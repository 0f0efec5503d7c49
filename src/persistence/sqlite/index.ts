/** Placeholder: this backend lands with the persistence issue. */
export {};
