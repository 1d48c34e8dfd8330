import { describe, expect, it } from 'vitest';
import { agUiAgent, ask, idsAreUnique, runOnce, shape } from '../helpers/ag-ui.js';
import { startTestServer } from '../helpers/server.js';

/**
 * Issue 29 point 1: the thread an AG-UI client holds after each run is the question, then the
 * answer's parts in the order they streamed, with nothing twice. `HttpAgent` keeps the messages whose
 * ids it knows in place and appends the others, so the closing MESSAGES_SNAPSHOT must name every
 * message as the run streamed it, and the user's message as the client named it.
 */
describe('AG-UI: the thread a client holds', () => {
  it('after text, thinking with a tool, a delegation and an approval: each question above its answer, no duplicates', async () => {
    const t = await startTestServer({ tool_confirmation: { execute: 'ask' } });
    const agent = agUiAgent(`${t.url}/ag-ui`, 'thread-order');
    const expected: string[] = [];
    const turn = async (text: string, answer: string[]) => {
      const questionId = ask(agent, text);
      const before = agent.messages.length;
      const run = await runOnce(agent);
      expect(run.error).toBeNull();
      expect(run.invalid).toEqual([]);
      expected.push('user', ...answer);
      expect(shape(agent.messages)).toEqual(expected);
      expect(agent.messages[before - 1]!.id).toBe(questionId);
      expect(idsAreUnique(agent.messages)).toBe(true);
      return run;
    };

    await turn('hello', ['assistant']);
    await turn('think: time', ['reasoning', 'assistant(tools)', 'tool', 'assistant']);
    await turn('delegate: add two and two', ['assistant(tools)', 'tool', 'assistant']);

    // An approval ends the run with an interrupt; the run that resumes it brings the rest.
    const asked = await turn('run: echo approved-from-ag-ui', ['assistant(tools)']);
    expect(agent.pendingInterrupts.map((i) => i.reason)).toEqual(['tool_call']);
    expect(asked.types.at(-1)).toBe('RUN_FINISHED');
    const resumed = await runOnce(agent, {
      resume: [
        { interruptId: agent.pendingInterrupts[0]!.id, status: 'resolved', payload: { approved: true } },
      ],
    });
    expect(resumed.error).toBeNull();
    expect(resumed.invalid).toEqual([]);
    expected.push('tool', 'assistant');
    expect(shape(agent.messages)).toEqual(expected);
    expect(idsAreUnique(agent.messages)).toBe(true);
    expect(String(agent.messages.at(-2)!.content)).toContain('approved-from-ag-ui');
    expect(agent.pendingInterrupts).toEqual([]);

    // A client loading the thread afresh gets the same shape, under metis's ids for the user's messages.
    const reloaded = agUiAgent(`${t.url}/ag-ui`, 'thread-order');
    await runOnce(reloaded);
    expect(shape(reloaded.messages)).toEqual(expected);
    const streamedIds = agent.messages.filter((m) => m.role !== 'user').map((m) => m.id);
    expect(reloaded.messages.filter((m) => m.role !== 'user').map((m) => m.id)).toEqual(streamedIds);
  });
});
