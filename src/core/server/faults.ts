/**
 * Fault switches for testing the conformance suite: each breaks one guarantee on purpose, so a test can
 * show that the matching check fails. They exist only with `metis serve --conformance`.
 */
export interface FaultSwitches {
  /** Send the last replayed event twice. */
  readonly duplicateReplayEvent?: boolean;
  /** Drop the first live event buffered at the seam. */
  readonly dropAtSeam?: boolean;
  /** Never answer a client's ping. */
  readonly ignorePings?: boolean;
}

export const NO_FAULTS: FaultSwitches = Object.freeze({});
