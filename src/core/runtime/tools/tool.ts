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

/** A tool the agent can call: a schema for its input, its side effects and what it does. */
export interface Tool<S extends z.ZodType = z.ZodType> {
  readonly name: string;
  readonly description: string;
  readonly inputSchema: S;
  readonly sideEffects: SideEffects;
  /** Human summary for confirmation prompts: the input whole up to `SUMMARY_MAX_CHARS`, an explicit cut past it (summary-bound.ts). */
  summarize?(input: z.output<S>): {
    input_summary: string;
    command_summary?: string;
    projected_modifications?: string[];
  };
  execute(input: z.output<S>, context: ToolContext): Promise<ToolOutput>;
}

export function defineTool<S extends z.ZodType>(tool: Tool<S>): Tool<S> {
  return tool;
}
