/**
 * Bundled into the browser page of test/browser/other-clients.test.ts: three clients nobody on metis
 * wrote, each driving a turn with thinking, a tool call and an approval, then a cancel, from the page:
 * the browser's own EventSource, `@ag-ui/client`'s HttpAgent and the `ai` package's chat transport.
 */
import { HttpAgent } from '@ag-ui/client';
import { DefaultChatTransport, readUIMessageStream, type UIMessage } from 'ai';

interface Flow {
  readonly seen: string[];
  readonly approvals: number;
}

const post = (url: string, body: unknown) =>
  fetch(url, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(body) });

const allow = (url: string, sessionId: string, requestId: string) =>
  post(`${url}/sessions/${sessionId}/confirmations/${requestId}`, { decision: 'allow' });

/** The browser's EventSource on GET /sessions/{id}/events; turns and answers over fetch. */
async function eventSourceFlow(url: string, sessionId: string): Promise<Flow> {
  const seen: string[] = [];
  let approvals = 0;
  const source = new EventSource(`${url}/sessions/${sessionId}/events?filter=preset:full&snapshot=false`);
  const ended: ((type: string) => void)[] = [];
  await new Promise<void>((resolve) => source.addEventListener('subscribe_ack', () => resolve()));
  source.onmessage = (message) => {
    const { event } = JSON.parse(message.data);
    seen.push(event.type);
    if (event.type === 'tool.confirmation_requested') {
      approvals += 1;
      void allow(url, sessionId, event.payload.confirmation_request_id);
    }
    if (event.type === 'text.delta' && event.payload.text.startsWith('Slowly'))
      void post(`${url}/sessions/${sessionId}/turns/${event.turn_id}/cancel`, {});
    if (event.type === 'turn.completed' || event.type === 'turn.cancelled') ended.shift()?.(event.type);
  };
  const turn = async (message: string) => {
    const done = new Promise<string>((resolve) => ended.push(resolve));
    await post(`${url}/sessions/${sessionId}/turns`, { message });
    return done;
  };
  seen.push(`end:${await turn('think: run: echo from-event-source')}`);
  seen.push(`end:${await turn('slow: cancel me')}`);
  source.close();
  return { seen, approvals };
}

/** AG-UI's HttpAgent on POST /ag-ui; the approval is the CUSTOM event, the cancel is abortRun. */
async function agUiFlow(url: string, threadId: string): Promise<Flow> {
  const seen: string[] = [];
  let approvals = 0;
  const agent = new HttpAgent({ url: `${url}/ag-ui`, threadId });
  const run = async (text: string, abortOnText: boolean) => {
    agent.addMessage({ id: crypto.randomUUID(), role: 'user', content: text });
    await agent
      .runAgent(
        {},
        {
          onEvent: ({ event }) => {
            seen.push(event.type);
            if (abortOnText && event.type === 'TEXT_MESSAGE_CONTENT') agent.abortRun();
          },
          onCustomEvent: ({ event }) => {
            if (event.name !== 'metis.confirmation_requested') return;
            approvals += 1;
            void allow(url, event.value.session_id, event.value.confirmation_request_id);
          },
        },
      )
      .catch(() => seen.push('aborted'));
  };
  await run('think: run: echo from-ag-ui', false);
  await run('slow: cancel me', true);
  return { seen, approvals };
}

/** The `ai` package's DefaultChatTransport on POST /api/chat, read as useChat reads it. */
async function aiSdkFlow(url: string, chatId: string): Promise<Flow> {
  const seen: string[] = [];
  let approvals = 0;
  const transport = new DefaultChatTransport({ api: `${url}/api/chat` });
  const send = async (text: string, abortOnText: boolean) => {
    const controller = new AbortController();
    const message: UIMessage = { id: crypto.randomUUID(), role: 'user', parts: [{ type: 'text', text }] };
    const stream = await transport.sendMessages({
      chatId,
      messages: [message],
      trigger: 'submit-message',
      messageId: undefined,
      abortSignal: controller.signal,
    });
    const [chunks, messages] = stream.tee();
    const reading = (async () => {
      const reader = chunks.getReader();
      for (;;) {
        const { done, value } = await reader.read();
        if (done) return;
        seen.push(value.type);
        if (value.type === 'tool-approval-request') {
          approvals += 1;
          void allow(url, chatId, value.approvalId);
        }
        if (abortOnText && value.type === 'text-delta') controller.abort();
      }
    })().catch(() => seen.push('aborted'));
    let last: UIMessage | undefined;
    await (async () => {
      for await (const update of readUIMessageStream({ stream: messages })) last = update;
    })().catch(() => undefined);
    await reading;
    if (last) seen.push(...last.parts.map((part) => `part:${part.type}`));
  };
  await send('think: run: echo from-ai-sdk', false);
  await send('slow: cancel me', true);
  return { seen, approvals };
}

Object.assign(globalThis, { eventSourceFlow, agUiFlow, aiSdkFlow, clientsReady: true });
