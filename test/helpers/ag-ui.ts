import { HttpAgent, type Message, type RunAgentParameters } from '@ag-ui/client';
import { EventSchema } from '@ag-ui/core/schemas';

/**
 * An AG-UI run seen as a client sees it: the real `@ag-ui/client` `HttpAgent` (its verifier checks the
 * order of every event), every event also parsed with `@ag-ui/core`'s own schema.
 */
export interface SeenRun {
  readonly events: ({ type: string } & Record<string, any>)[];
  /** Events `@ag-ui/core`'s EventSchema refused, with why. */
  readonly invalid: string[];
  readonly types: string[];
  /** The run's error, when it ended in RUN_ERROR or the client threw. */
  error: unknown;
}

export function agUiAgent(url: string, threadId: string): HttpAgent {
  return new HttpAgent({ url, threadId });
}

/** Adds a user message with a fresh client id, as a page does, and returns the id. */
export function ask(agent: HttpAgent, text: string): string {
  const id = `u_${Math.random().toString(36).slice(2)}`;
  agent.addMessage({ id, role: 'user', content: text });
  return id;
}

/** Runs the agent once, recording every event; never throws (the error is in `error`). */
export async function runOnce(
  agent: HttpAgent,
  parameters: RunAgentParameters = {},
  onEvent: (event: { type: string } & Record<string, any>) => void = () => {},
): Promise<SeenRun> {
  const seen: SeenRun = { events: [], invalid: [], types: [], error: null };
  try {
    await agent.runAgent(parameters, {
      onEvent: ({ event }) => {
        const parsed = EventSchema.safeParse(event);
        if (!parsed.success) seen.invalid.push(`${event.type}: ${parsed.error.message}`);
        seen.events.push(event as never);
        seen.types.push(event.type);
        onEvent(event as never);
      },
    });
  } catch (error) {
    seen.error = error;
  }
  return seen;
}

/** The messages as `role` or `role(tools)`, the shape a reordering or a duplicate shows in. */
export function shape(messages: readonly Message[]): string[] {
  return messages.map((m) =>
    m.role === 'assistant' && (m.toolCalls?.length ?? 0) > 0 ? 'assistant(tools)' : m.role,
  );
}

export function idsAreUnique(messages: readonly Message[]): boolean {
  return new Set(messages.map((m) => m.id)).size === messages.length;
}

export function eventOf(run: SeenRun, type: string): ({ type: string } & Record<string, any>) | undefined {
  return run.events.find((event) => event.type === type);
}
