/** Moves the cursor up one line and erases it: the line printed last is replaced by what follows. */
export const REPLACE_LAST_LINE = '\u001b[1A\u001b[2K';

/** How long a model call may stream nothing before the wait is shown. */
const SHOW_AFTER_MS = 2_000;

/**
 * "waiting for <model>… 5 s": a model call that has produced nothing yet. The provider's retries before
 * the first token happen in that wait (bus §6.3 counts them in `llm.call_failed.retry_count`, no event
 * marks them), so this is where a user sees them. On a terminal the line counts up in place while it
 * is the last line, and is erased when the answer starts; in a pipe it is written once.
 */
export class ModelWaitLine {
  private timer: NodeJS.Timeout | null = null;
  private since = 0;
  private model = '';
  /** Whether the waiting line is on screen and still the last line written. */
  private lastOnScreen = false;

  constructor(
    private readonly out: { write(text: string): unknown },
    private readonly inPlace: boolean,
    private readonly style: (text: string) => string,
    private readonly showAfterMs = SHOW_AFTER_MS,
    private readonly now: () => number = Date.now,
  ) {}

  /** A model call started: the wait begins. */
  start(model: string): void {
    this.stop();
    this.model = model;
    this.since = this.now();
    this.timer = setTimeout(() => this.show(), this.showAfterMs);
    this.timer.unref();
  }

  /**
   * Something else is about to be written: the wait (if the call produced its first output, or ended)
   * or just the line's place as last line ends. Returns what to write first: an erase of the waiting
   * line when it is the last line on a terminal and the wait is over.
   */
  before(waitOver: boolean): string {
    const erase = waitOver && this.inPlace && this.lastOnScreen ? REPLACE_LAST_LINE : '';
    if (waitOver) this.stop();
    else if (this.lastOnScreen) {
      this.lastOnScreen = false;
      if (this.inPlace) this.stopTicking();
    }
    return erase;
  }

  private show(): void {
    this.lastOnScreen = true;
    this.out.write(this.line());
    if (!this.inPlace) {
      this.timer = null;
      return;
    }
    this.timer = setInterval(() => {
      if (this.lastOnScreen) this.out.write(REPLACE_LAST_LINE + this.line());
    }, 1_000);
    this.timer.unref();
  }

  private line(): string {
    const seconds = Math.round((this.now() - this.since) / 1000);
    return `${this.style(`  waiting for ${this.model}… ${seconds} s (retries happen here)`)}\n`;
  }

  private stopTicking(): void {
    if (this.timer !== null) clearInterval(this.timer);
    this.timer = null;
  }

  private stop(): void {
    if (this.timer !== null) {
      clearTimeout(this.timer);
      clearInterval(this.timer);
    }
    this.timer = null;
    this.lastOnScreen = false;
  }
}
