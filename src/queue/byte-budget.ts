/**
 * A count of bytes held against a limit: what one instance may hold in memory
 * of some kind (items waiting for Redis, deliveries waiting for workers).
 */
export class ByteBudget {
  private held = 0;

  constructor(readonly limit: number) {}

  /** Bytes held now. */
  get used(): number {
    return this.held;
  }

  /** True while at least the limit is held. */
  get full(): boolean {
    return this.held >= this.limit;
  }

  /**
   * Holds `bytes` if they fit under the limit, or if nothing is held (so one
   * thing larger than the limit still goes through alone); false otherwise.
   */
  take(bytes: number): boolean {
    if (this.held > 0 && this.held + bytes > this.limit) return false;
    this.held += bytes;
    return true;
  }

  /** Holds `bytes` whatever the limit (bytes already in memory, being counted). */
  add(bytes: number): void {
    this.held += bytes;
  }

  /** Gives back bytes taken or added. */
  give(bytes: number): void {
    this.held = Math.max(0, this.held - bytes);
  }
}
