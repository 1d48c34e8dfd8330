import type { MetisConfig } from '../config/schema.js';
import { FAULT_NAMES, type FaultName, type FaultSwitches } from '../stream/faults.js';

/** Pause before each tool runs in `--conformance` mode (docs/conformance.md). */
export const SEAM_PAUSE_MS = 300;

/** What `--conformance` turns off or changes, said in the banner (issue 13, observation 7). */
export const CONFORMANCE_WARNING =
  'tools run WITHOUT confirmation, heartbeats every 250 ms, tool calls paused 300 ms, test routes open: for the conformance suite only, never for real work';

/** The conformance suite needs short heartbeats to test them in seconds. */
export const CONFORMANCE_HEARTBEAT_MS = 250;

/** Tools run without confirmation and the scripted model streams fast, so checks take seconds. */
export function conformanceRuntime(runtime: MetisConfig['runtime']): MetisConfig['runtime'] {
  return {
    ...runtime,
    tool_confirmation: { write: 'allow', execute: 'allow', network: 'allow' },
    scripted: { token_delay_ms: 1, slow_token_delay_ms: 10, slow_tokens: 400 },
  };
}

/** The fault switches `--conformance --fault <name>` turns on. */
export function faultSwitches(names: readonly FaultName[]): FaultSwitches {
  const faults: Record<string, boolean> = {};
  for (const name of names) faults[FAULT_NAMES[name]] = true;
  return faults as FaultSwitches;
}

/** A fixed pause between tool.called and execution gives the suite a seam to cancel into. */
export function seamPause(): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, SEAM_PAUSE_MS));
}
