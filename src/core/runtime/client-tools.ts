import { z } from 'zod';
import { MetisError } from '../errors.js';
import { type Tool, type ToolContext, ToolError, type ToolOutput } from './tools/tool.js';

/**
 * A tool the client declared for one turn and runs itself (an AG-UI frontend tool): metis offers it
 * to the model with the client's JSON Schema, and its call waits for the result the client sends.
 */
export interface ClientToolDeclaration {
  readonly name: string;
  readonly description: string;
  /** JSON Schema of the input, as the client gave it. */
  readonly parameters: Record<string, unknown>;
}

/** What the client sent back for one call. */
export interface ClientToolResult {
  readonly content: string;
  /** The client's error for the call, if it failed: the model gets it as a failed result. */
  readonly error: string | null;
}

interface Waiting {
  readonly sessionId: string;
  readonly settle: (result: ClientToolResult) => void;
}

/**
 * The calls of client tools waiting for their results, and results sent before their call started
 * waiting (the client answers every call of a model message at once, the dispatcher runs them one at a
 * time). A call waits like a confirmation does (confirmations.ts): until the result, the timeout or the
 * turn's cancel.
 */
export class ClientToolResults {
  private readonly waiting = new Map<string, Waiting>();
  /** By session, then tool use id: results no call waited for yet. Dropped when the turn ends. */
  private readonly early = new Map<string, Map<string, ClientToolResult>>();
  /** The client tools of each session's turn in flight, by name. */
  private readonly declared = new Map<string, ReadonlySet<string>>();

  constructor(
    /** metis's own tools: a client's tool may not take one of their names. */
    private readonly ownToolNames: readonly string[],
  ) {}

  /**
   * The client tools of a turn, as tools the dispatcher runs: their execution is the wait. Undefined
   * when the turn has none.
   * @throws MetisError METIS_ERR_INVALID_ARGUMENT for a client tool named like one of metis's.
   */
  toolsFor(
    sessionId: string,
    declarations: readonly ClientToolDeclaration[],
    timeoutMs: number,
  ): Tool[] | undefined {
    const taken = declarations.find((d) => this.ownToolNames.includes(d.name));
    if (taken !== undefined)
      throw new MetisError(
        'METIS_ERR_INVALID_ARGUMENT',
        `tools: "${taken.name}" is a tool of metis; give yours another name`,
      );
    if (declarations.length === 0) return undefined;
    this.declared.set(sessionId, new Set(declarations.map((d) => d.name)));
    return declarations.map((declaration) => ({
      name: declaration.name,
      description: declaration.description,
      // The client checks its own input; metis only needs an object to hand over.
      inputSchema: z.record(z.string(), z.unknown()),
      inputJsonSchema: declaration.parameters,
      // It runs in the user's own page, in front of the user: no side-effect policy applies.
      sideEffects: 'none',
      execute: (_input: unknown, context: ToolContext) => this.wait(context, declaration.name, timeoutMs),
    }));
  }

  /** Names of the client tools the session's turn in flight declared (empty when none). */
  clientToolNames(sessionId: string): ReadonlySet<string> {
    return this.declared.get(sessionId) ?? new Set();
  }

  /** Tool use ids of the session's calls waiting now. */
  waitingIn(sessionId: string): string[] {
    return [...this.waiting].filter(([, w]) => w.sessionId === sessionId).map(([id]) => id);
  }

  /** Hands the client's result to the call, now or once it starts waiting. */
  deliver(sessionId: string, toolUseId: string, result: ClientToolResult): void {
    const waiting = this.waiting.get(toolUseId);
    if (waiting?.sessionId === sessionId) {
      waiting.settle(result);
      return;
    }
    const early = this.early.get(sessionId) ?? new Map<string, ClientToolResult>();
    early.set(toolUseId, result);
    this.early.set(sessionId, early);
  }

  /** The session's turn ended: nothing of it waits any more. */
  forget(sessionId: string): void {
    this.early.delete(sessionId);
    this.declared.delete(sessionId);
  }

  private wait(context: ToolContext, toolName: string, timeoutMs: number): Promise<ToolOutput> {
    const { sessionId, toolUseId, signal } = context;
    const sent = this.early.get(sessionId)?.get(toolUseId);
    if (sent !== undefined) {
      this.early.get(sessionId)?.delete(toolUseId);
      return Promise.resolve(outputOf(sent));
    }
    return new Promise((resolve, reject) => {
      const done = () => {
        this.waiting.delete(toolUseId);
        clearTimeout(timer);
        signal.removeEventListener('abort', onAbort);
      };
      const timer = setTimeout(() => {
        done();
        reject(new ToolError('timeout', `the client sent no result for ${toolName} in time`));
      }, timeoutMs);
      const onAbort = () => {
        done();
        reject(new ToolError('cancelled', `the turn was cancelled while ${toolName} waited for the client`));
      };
      this.waiting.set(toolUseId, {
        sessionId,
        settle: (result) => {
          done();
          resolve(outputOf(result));
        },
      });
      if (signal.aborted) onAbort();
      else signal.addEventListener('abort', onAbort, { once: true });
    });
  }
}

function outputOf(result: ClientToolResult): ToolOutput {
  return result.error === null
    ? { content: result.content }
    : { content: result.error || result.content, success: false };
}
