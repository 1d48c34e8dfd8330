import { z } from 'zod';
import { HttpError } from '../../../http/http-util.js';
import type { ClientToolDeclaration, ClientToolResult } from '../../../runtime/client-tools.js';
import { ClientSessionId } from '../../client-session-id.js';

/** AG-UI's `RunAgentInput` (`@ag-ui/core` 1.0); fields metis does not use are let through. */
export const RunAgentInput = z.looseObject({
  threadId: ClientSessionId,
  runId: z.string().min(1).max(200),
  messages: z
    .array(
      z.looseObject({
        id: z.string(),
        role: z.enum(['user', 'assistant', 'system', 'developer', 'tool', 'reasoning', 'activity']),
        content: z.unknown().optional(),
        toolCallId: z.string().optional(),
        error: z.string().optional(),
      }),
    )
    .describe(
      'Empty: a run that starts no turn and reports the thread as stored (MESSAGES_SNAPSHOT), as a client ' +
        'loading a thread sends. Otherwise the last message must be a user message with text content: it starts the turn; ' +
        'or the tool messages answering the frontend tool calls the thread waits for: they continue its turn.',
    ),
  tools: z
    .array(
      z.looseObject({
        name: z.string().regex(/^[a-zA-Z0-9_-]{1,64}$/, 'letters, digits, _ and -, at most 64'),
        description: z.string().default(''),
        parameters: z.record(z.string(), z.unknown()).optional(),
      }),
    )
    .default([])
    .describe("Frontend tools: offered to the model beside metis's own; the client runs them."),
  context: z.array(z.unknown()).default([]),
  protocolVersion: z
    .string()
    .optional()
    .describe('1.0 or later: approvals end the run as interrupts; absent: they keep it open (docs/ag-ui.md)'),
  resume: z
    .array(
      z.looseObject({
        interruptId: z.string(),
        status: z.enum(['resolved', 'cancelled']),
        payload: z.unknown().optional(),
      }),
    )
    .optional()
    .describe(
      'Answers to the interrupts (tool approvals) that ended the previous run: payload {approved: boolean, ' +
        'scope?: "once" | "session"}; cancelled denies.',
    ),
});

export type AgUiInput = z.output<typeof RunAgentInput>;
type InputMessage = AgUiInput['messages'][number];

/**
 * Whether the client speaks the protocol's interrupts: it declares a version, 1.0 or later. A client
 * from before versions may not know the interrupt outcome (an unknown outcome reads as success), so it
 * keeps the approval flow that needs none: the run stays open until the approval is answered.
 */
export function speaksInterrupts(input: AgUiInput): boolean {
  const major = /^(\d+)\./.exec(input.protocolVersion ?? '')?.[1];
  return major !== undefined && Number(major) >= 1;
}

/** The text of the last message, which must be the user's: what the run is asked. */
export function lastUserText(messages: readonly InputMessage[]): string {
  const last = messages.at(-1);
  const text = last === undefined ? '' : textOf(last.content);
  if (last?.role !== 'user' || text.trim() === '')
    throw new HttpError(
      400,
      'METIS_ERR_INVALID_ARGUMENT',
      'messages: the last message must be a user message with text content (it starts the run)',
    );
  return text;
}

/** A message's text: a string, or its text parts joined. */
export function textOf(content: unknown): string {
  if (typeof content === 'string') return content;
  if (!Array.isArray(content)) return '';
  return content
    .filter(
      (part): part is { type: 'text'; text: string } =>
        part?.type === 'text' && typeof part.text === 'string',
    )
    .map((part) => part.text)
    .join('');
}

/** The frontend tools of the run, as the runtime offers them (it refuses one named like its own). */
export function clientToolsOf(input: AgUiInput): ClientToolDeclaration[] {
  return input.tools.map((tool) => ({
    name: tool.name,
    description: tool.description,
    parameters: tool.parameters ?? { type: 'object', properties: {} },
  }));
}

/** The tool messages of the input, by the tool call they answer (the last one wins). */
export function toolResultsOf(
  messages: readonly InputMessage[],
): Map<string, ClientToolResult & { messageId: string }> {
  const results = new Map<string, ClientToolResult & { messageId: string }>();
  for (const message of messages) {
    if (message.role !== 'tool' || message.toolCallId === undefined) continue;
    results.set(message.toolCallId, {
      messageId: message.id,
      content: textOf(message.content),
      error: message.error ?? null,
    });
  }
  return results;
}
