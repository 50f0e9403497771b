// Preloaded with `node --import` into a Switchyard server process of the chaos
// suite: shifts this process's wall clock by CHAOS_CLOCK_SKEW_MS, as a host
// whose clock is off would be. Date.now(), new Date() and Date() all read the
// skewed time; monotonic clocks (performance.now, process.hrtime) and timers
// are untouched, as on a real host with a wrong wall clock.
const skew = Number(process.env.CHAOS_CLOCK_SKEW_MS ?? 0);
if (skew) {
  const RealDate = Date;
  const realNow = RealDate.now.bind(RealDate);
  class SkewedDate extends RealDate {
    constructor(...args) {
      if (args.length === 0) super(realNow() + skew);
      else super(...args);
    }
    static now() {
      return realNow() + skew;
    }
  }
  globalThis.Date = new Proxy(SkewedDate, {
    // Date() called without new returns the current time as a string.
    apply: () => new RealDate(realNow() + skew).toString(),
  });
}
