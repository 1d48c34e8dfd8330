import type { z } from 'zod';

export type SideEffects = 'none' | 'read' | 'write' | 'execute' | 'network';

/** Failure classes of `tool.failed` (bus spec §6.4). */
export type ToolErrorClass =
  | 'timeout'
  | 'permission_denied'
  | 'not_found'
  | 'validation_error'
  | 'execution_error'
  | 'cancelled'
  | 'user_denied'
  | 'confirmation_timeout';

/** A tool failure the dispatcher reports as `tool.failed` with this class. */
export class ToolError extends Error {
  constructor(
    readonly errorClass: ToolErrorClass,
    message: string,
  ) {
    super(message);
    this.name = 'ToolError';
  }
}

export interface ToolContext {
  readonly sessionId: string;
  readonly turnId: string;
  readonly toolUseId: string;
  /** Absolute workspace folder of the session; relative paths resolve against it. */
  readonly workspacePath: string;
  /** Aborts when the turn is cancelled: stop at once and clean up (kill child processes). */
  readonly signal: AbortSignal;
  /** The `tool.called` event of this call. */
  readonly toolCalledEventId: string | null;
  /** The `llm.call_completed` that asked for this call: parent of `delegate.started` (bus §6.8). */
  readonly callCompletedEventId: string | null;
}

export interface ToolOutput {
  /** The text returned to the model as the tool_result. */
  readonly content: string;
  /**
   * False when the tool ran to the end but what it did reported failure (a command's non-zero exit):
   * `tool.completed.success` and the tool_result's `is_error`. Absent means true.
   */
  readonly success?: boolean;
  readonly filesModified?: readonly string[] | null;
  readonly commandExecuted?: string | null;
}

/**
 * A confirmation one call needs whatever its tool's side-effect policy says: `read_file` on a path
 * outside the workspace, or on a file that may hold secrets. Sent as `tool.confirmation_requested`.
 */
export interface CallConfirmation {
  readonly side_effects: Exclude<SideEffects, 'none'>;
  /** Names the resolved target and why the call asks ("outside the workspace", "may hold secrets"). */
  readonly input_summary: string;
  /** False: an "allow for the session" does not cover later calls, each asks again (secrets). */
  readonly session_allowable: boolean;
}

/** What `Tool.checkCall` decided for one call. */
export interface CallCheck<P = unknown> {
  /** Handed to `execute` as is, so what was checked and confirmed is exactly what runs. */
  readonly prepared: P;
  /** Null: only the tool's side-effect policy applies. */
  readonly confirmation: CallConfirmation | null;
}

/** A tool the agent can call: a schema for its input, its side effects and what it does. */
export interface Tool<S extends z.ZodType = z.ZodType, P = unknown> {
  readonly name: string;
  readonly description: string;
  readonly inputSchema: S;
  /** The input's JSON Schema as the model is shown it, when not derived from `inputSchema` (a client's tool). */
  readonly inputJsonSchema?: Record<string, unknown>;
  readonly sideEffects: SideEffects;
  /**
   * Whether running the same call twice is harmless: a call a restart cut while it ran is run again
   * only then, otherwise the model is told it was interrupted (docs/runtime.md "Durable turns").
   */
  readonly repeatSafe?: boolean;
  /** Human summary for confirmation prompts: the input whole up to `SUMMARY_MAX_CHARS`, an explicit cut past it (summary-bound.ts). */
  summarize?(input: z.output<S>): {
    input_summary: string;
    command_summary?: string;
    projected_modifications?: string[];
  };
  /**
   * Per-call check, run by the dispatcher before the side-effect policy: it may ask for a confirmation
   * of its own, refuse by throwing a `ToolError` (e.g. `permission_denied`), or let the call run.
   */
  checkCall?(input: z.output<S>, context: ToolContext): Promise<CallCheck<P>>;
  /** `prepared` is what `checkCall` returned; absent when the tool is run without the dispatcher. */
  execute(input: z.output<S>, context: ToolContext, prepared?: P): Promise<ToolOutput>;
}

export function defineTool<S extends z.ZodType, P = unknown>(tool: Tool<S, P>): Tool<S, P> {
  return tool;
}
