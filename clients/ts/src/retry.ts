/**
 * When to try again after a party refused for now (429 `backlog_full`/`storage_full`/`rate_limited`,
 * 503 `too_many_waiters`/`too_many_connections`/`redis_unavailable`/`no_database`/`not_durable`)
 * or could not be reached: after its `Retry-After`, stretched by a random part so that the
 * clients it refused together do not all come back in the same instant (issue 22), and only
 * while the lookup's deadline leaves room for it.
 */

/** The first wait when the party gave no `Retry-After` (a refused connection): doubled each try… */
export const BASE_RETRY_WAIT_MS = 100;

/** …up to this (before the jitter). */
export const MAX_BACKOFF_MS = 2_000;

/**
 * Seconds in a `Retry-After` header: a non-negative integer (RFC 9110 §10.2.3; the HTTP-date
 * form is not used by pirq gateways and is ignored), else undefined.
 */
export function parseRetryAfter(value: string | null): number | undefined {
  if (value === null || !/^\s*\d{1,9}\s*$/.test(value)) return undefined;
  return Number(value);
}

/**
 * Milliseconds to wait before try `attempt + 1` (attempt 0 is the first request): the party's
 * `Retry-After`, but never less than {@link BASE_RETRY_WAIT_MS} doubled per attempt up to
 * {@link MAX_BACKOFF_MS} (so `Retry-After: 0`, or none, is a capped exponential back-off, never
 * a busy loop: issue 36); then multiplied by a random factor in [1, 1.5), so never sooner than
 * the party asked (FAKE_PARTY.md: the Rust client does the same). The deadline bounds the rest:
 * a wait that would end past it is not made. `random` is for tests.
 */
export function retryDelayMs(attempt: number, retryAfterSeconds: number | undefined, random: () => number = Math.random): number {
  const backoff = Math.min(MAX_BACKOFF_MS, BASE_RETRY_WAIT_MS * 2 ** Math.min(attempt, 20));
  const base = Math.max(backoff, (retryAfterSeconds ?? 0) * 1000);
  return base * (1 + random() / 2);
}

/** Resolves after `ms`, or rejects with the signal's reason as soon as it aborts. */
export function sleep(ms: number, signal?: AbortSignal): Promise<void> {
  return new Promise((resolve, reject) => {
    if (signal?.aborted) return reject(signal.reason);
    const t = setTimeout(done, ms);
    function done() {
      signal?.removeEventListener("abort", onAbort);
      resolve();
    }
    function onAbort() {
      clearTimeout(t);
      reject(signal!.reason);
    }
    signal?.addEventListener("abort", onAbort, { once: true });
  });
}
