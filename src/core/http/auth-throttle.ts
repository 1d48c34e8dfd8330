/**
 * Slows down whoever keeps sending wrong tokens (issue 13, observation 4): after `maxFailures` 401s
 * within `windowMs` a key (a client address, or a presented secret's hash: auth-gate.ts) is answered 429
 * for `baseDelayMs`, and each failure after a pause doubles the pause up to `maxDelayMs`. Only failures
 * are counted and slowed: a right token is checked first and always passes (issue 34, observation 4). Guessing a 32-byte token is hopeless
 * anyway; this keeps a runaway script from burning the CPU and makes the attempt visible in the log.
 *
 * Bounded: at most `maxPeers` are remembered; past it the least recently seen goes first (a Map keeps
 * insertion order, and every touch re-inserts).
 */
export interface AuthThrottleOptions {
  readonly maxFailures: number;
  readonly windowMs: number;
  readonly baseDelayMs: number;
  readonly maxDelayMs: number;
  readonly maxPeers: number;
}

export const DEFAULT_AUTH_THROTTLE: AuthThrottleOptions = {
  maxFailures: 5,
  windowMs: 60_000,
  baseDelayMs: 1_000,
  maxDelayMs: 60_000,
  maxPeers: 10_000,
};

interface PeerState {
  /** Failures since `windowStart`. */
  failures: number;
  windowStart: number;
  /** While now < blockedUntil the peer gets 429 without its token being looked at. */
  blockedUntil: number;
  /** The next pause; doubles per pause in one episode. */
  nextDelayMs: number;
  /** Whether this episode was logged already (one warn line per episode). */
  logged: boolean;
}

/** What a failure did: whether it started a pause, and whether this episode must be logged now. */
export interface FailureOutcome {
  readonly blocked: boolean;
  readonly logNow: boolean;
  readonly failures: number;
}

export class AuthThrottle {
  private readonly peers = new Map<string, PeerState>();
  private readonly options: AuthThrottleOptions;

  constructor(options: Partial<AuthThrottleOptions> = {}) {
    this.options = { ...DEFAULT_AUTH_THROTTLE, ...options };
  }

  /** Peers remembered (for tests of the bound). */
  get size(): number {
    return this.peers.size;
  }

  /** Seconds the peer must wait (Retry-After), or 0 when it may try. */
  retryAfterSeconds(peer: string, now = Date.now()): number {
    const state = this.peers.get(peer);
    if (state === undefined || state.blockedUntil <= now) return 0;
    return Math.max(1, Math.ceil((state.blockedUntil - now) / 1000));
  }

  /** Records a 401 for `peer`. */
  failure(peer: string, now = Date.now()): FailureOutcome {
    let state = this.peers.get(peer);
    if (
      state === undefined ||
      (state.blockedUntil <= now && now - state.windowStart > this.options.windowMs)
    ) {
      // A quiet minute ends the episode: the next pause starts at the base again.
      state = {
        failures: 0,
        windowStart: now,
        blockedUntil: 0,
        nextDelayMs: this.options.baseDelayMs,
        logged: false,
      };
    }
    this.peers.delete(peer);
    this.peers.set(peer, state);
    this.evict();
    state.failures += 1;
    if (state.failures < this.options.maxFailures)
      return { blocked: false, logNow: false, failures: state.failures };
    state.blockedUntil = now + state.nextDelayMs;
    state.windowStart = now;
    state.nextDelayMs = Math.min(state.nextDelayMs * 2, this.options.maxDelayMs);
    const logNow = !state.logged;
    state.logged = true;
    return { blocked: true, logNow, failures: state.failures };
  }

  private evict(): void {
    while (this.peers.size > this.options.maxPeers) {
      const oldest = this.peers.keys().next().value as string;
      this.peers.delete(oldest);
    }
  }
}
