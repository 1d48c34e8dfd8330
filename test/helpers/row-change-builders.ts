import type { PatternInsert, RowChange, ToolCallInsert } from '../../src/core/store/row-change.js';

/** RowChanges of each kind with every field filled, for the applier tests (sess_a, turn_1, msg_1 by default). */

export const session = (
  sessionId: string,
  atUs: number,
  parentSessionId: string | null = null,
): Extract<RowChange, { kind: 'session.create' }> => ({
  kind: 'session.create',
  sessionId,
  parentSessionId,
  workspacePath: `/ws/${sessionId}`,
  workspaceHash: `h_${sessionId}`,
  activeModel: 'scripted:a',
  stickyModel: null,
  atUs,
});

export const toolCall = (
  id: string,
  status: string,
  fields: Partial<Omit<ToolCallInsert, 'kind'>> = {},
): ToolCallInsert => ({
  kind: 'toolCall.insert',
  rowId: null,
  id,
  sessionId: 'sess_a',
  turnId: 'turn_1',
  messageId: 'msg_1',
  toolName: 'read_file',
  inputJson: `{"path":"${id}"}`,
  status,
  atUs: 10,
  ...fields,
});

export const toolCallUpdate = (
  id: string,
  status: string,
): Extract<RowChange, { kind: 'toolCall.update' }> => ({
  kind: 'toolCall.update',
  id,
  sessionId: 'sess_a',
  turnId: 'turn_1',
  messageId: 'msg_1',
  status,
  outputJson: `"${id} ${status}"`,
  errorClass: null,
  atUs: 20,
});

export const pattern = (n: number, atUs: number, fields: Partial<PatternInsert> = {}): PatternInsert => ({
  kind: 'pattern.insert',
  rowId: null,
  fingerprintId: `fp_${n}`,
  key: `key_${n}`,
  featuresJson: '{}',
  model: 'scripted:a',
  sessionId: 'sess_a',
  score: 0.5,
  costUsd: 0.01,
  turns: 1,
  atUs,
  ...fields,
});

export const archived = (sessionId: string, n: number, timestampUs: number) => ({
  sessionId,
  id: `evt_${String(n).padStart(3, '0')}`,
  timestampUs,
  eventJson: `{"n":${n}}`,
});

/** Closes sess_a's open calls (every turn's), as a cut turn's recovery does. */
export const closeOpen = (atUs: number): Extract<RowChange, { kind: 'toolCall.closeOpen' }> => ({
  kind: 'toolCall.closeOpen',
  sessionId: 'sess_a',
  turnId: null,
  status: 'cancelled',
  errorClass: 'cancelled',
  outputJson: '"cut"',
  atUs,
});
