/**
 * Bundled into the browser page of test/browser/other-clients.test.ts: three clients nobody on metis
 * wrote, each driving a turn with thinking, a tool call and an approval, then a cancel, from the page:
 * the browser's own EventSource, `@ag-ui/client`'s HttpAgent and the `ai` package's `Chat` (what
 * `useChat` wraps). The last two render their conversation into the page, with an Approve button for
 * the approval, as an app on them does.
 */
import {
  type AgentSubscriber,
  buildResumeArray,
  HttpAgent,
  type Interrupt,
  type Message,
  type ResumeEntry,
  type RunAgentParameters,
} from '@ag-ui/client';
import {
  AbstractChat,
  type ChatInit,
  type ChatState,
  type ChatStatus,
  DefaultChatTransport,
  getToolName,
  isToolUIPart,
  lastAssistantMessageIsCompleteWithApprovalResponses,
  type UIMessage,
  type UIMessageChunk,
} from 'ai';

/** The little of the DOM this page uses: tsconfig.json has no DOM lib, the rest of the program is Node's. */
interface PageElement {
  id: string;
  textContent: string | null;
  readonly dataset: Record<string, string | undefined>;
  append(...nodes: PageElement[]): void;
  replaceChildren(...nodes: PageElement[]): void;
  addEventListener(type: 'click', listener: () => void, options?: { once?: boolean }): void;
}
declare const document: { createElement(tag: string): PageElement; readonly body: PageElement };

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

/** One section of the page per flow: what its user sees. */
function section(id: string): PageElement {
  const element = document.createElement('section');
  element.id = id;
  document.body.append(element);
  return element;
}

/** One line of a conversation as a page shows it; `part` says what it is (user, text, tool, …). */
function line(part: string, text: string): PageElement {
  const element = document.createElement('p');
  element.dataset.part = part;
  element.textContent = text;
  return element;
}

function approveButton(label: string, onClick: () => void): PageElement {
  const button = document.createElement('button');
  button.textContent = `Approve ${label}`;
  button.addEventListener('click', onClick, { once: true });
  return button;
}

const contentText = (content: unknown): string =>
  typeof content === 'string'
    ? content
    : Array.isArray(content)
      ? content.map((part: { text?: string }) => part.text ?? '').join('')
      : '';

/** The thread as a page built on `@ag-ui/client` shows `agent.messages`. */
function renderThread(view: PageElement, messages: readonly Message[]): void {
  view.replaceChildren(
    ...messages.flatMap((message) => {
      const lines = [];
      const text = contentText('content' in message ? message.content : undefined);
      if (message.role === 'tool') lines.push(line('tool', `${message.toolCallId}: ${text}`));
      else if (text !== '') lines.push(line(message.role === 'assistant' ? 'text' : message.role, text));
      if (message.role === 'assistant')
        for (const call of message.toolCalls ?? [])
          lines.push(line('tool-call', `${call.function.name} ${call.function.arguments}`));
      return lines;
    }),
  );
}

/**
 * AG-UI's HttpAgent on POST /ag-ui, as a page on `@ag-ui/client` 1.0 uses it: an approval ends the run
 * as an interrupt, the page shows it with an Approve button (the test clicks it), and the next run
 * resumes it; the cancel is abortRun.
 */
async function agUiFlow(url: string, threadId: string): Promise<Flow> {
  const seen: string[] = [];
  let approvals = 0;
  const view = section('ag-ui');
  const agent = new HttpAgent({ url: `${url}/ag-ui`, threadId });
  const subscriber = (abortOnText: boolean): AgentSubscriber => ({
    onEvent: ({ event }) => {
      seen.push(event.type);
      if (abortOnText && event.type === 'TEXT_MESSAGE_CONTENT') agent.abortRun();
    },
    onRunFinishedEvent: ({ outcome }) => {
      seen.push(`outcome:${outcome}`);
    },
    onMessagesChanged: ({ messages }) => renderThread(view, messages),
  });
  const run = (parameters: RunAgentParameters, abortOnText = false) =>
    agent.runAgent(parameters, subscriber(abortOnText)).catch(() => seen.push('aborted'));
  /** The interrupts the run ended with, each with an Approve button; resolves once all are answered. */
  const answered = (interrupts: readonly Interrupt[]) =>
    new Promise<ResumeEntry[]>((resolve) => {
      const responses: Record<string, { status: 'resolved'; payload: { approved: boolean } }> = {};
      for (const interrupt of interrupts)
        view.append(
          line('interrupt', interrupt.message ?? interrupt.reason),
          approveButton(String(interrupt.metadata?.metis?.tool_name ?? interrupt.reason), () => {
            approvals += 1;
            responses[interrupt.id] = { status: 'resolved', payload: { approved: true } };
            if (Object.keys(responses).length === interrupts.length)
              resolve(buildResumeArray([...interrupts], responses));
          }),
        );
    });

  agent.addMessage({ id: crypto.randomUUID(), role: 'user', content: 'think: run: echo from-ag-ui' });
  await run({});
  if (agent.pendingInterrupts.length > 0) await run({ resume: await answered(agent.pendingInterrupts) });
  seen.push(`pending:${agent.pendingInterrupts.length}`);

  agent.addMessage({ id: crypto.randomUUID(), role: 'user', content: 'slow: cancel me' });
  await run({}, true);
  return { seen, approvals };
}

/**
 * The chat state a UI framework keeps (React's `useChat` keeps the same in React state), rendered into
 * the page on every change, as a component re-renders.
 */
class PageChatState implements ChatState<UIMessage> {
  private statusNow: ChatStatus = 'ready';
  private messagesNow: UIMessage[] = [];
  private errorNow: Error | undefined = undefined;
  constructor(private readonly render: (state: PageChatState) => void) {}
  get status(): ChatStatus {
    return this.statusNow;
  }
  set status(status: ChatStatus) {
    this.statusNow = status;
    this.render(this);
  }
  get error(): Error | undefined {
    return this.errorNow;
  }
  set error(error: Error | undefined) {
    this.errorNow = error;
    this.render(this);
  }
  get messages(): UIMessage[] {
    return this.messagesNow;
  }
  set messages(messages: UIMessage[]) {
    this.messagesNow = messages;
    this.render(this);
  }
  pushMessage = (message: UIMessage) => {
    this.messages = [...this.messagesNow, message];
  };
  popMessage = () => {
    this.messages = this.messagesNow.slice(0, -1);
  };
  replaceMessage = (index: number, message: UIMessage) => {
    this.messages = this.messagesNow.map((old, at) => (at === index ? message : old));
  };
  snapshot = <T>(thing: T): T => structuredClone(thing);
}

class PageChat extends AbstractChat<UIMessage> {
  constructor(init: ChatInit<UIMessage>, render: (state: PageChatState) => void) {
    super({ ...init, state: new PageChatState(render) });
  }
}

/** The transport `useChat` uses, noting each request's history and each chunk's type on the way. */
class WatchedTransport extends DefaultChatTransport<UIMessage> {
  constructor(url: string, seen: string[]) {
    super({
      api: `${url}/api/chat`,
      fetch: (input, init) => {
        const messages = (JSON.parse(String(init?.body ?? '{}')).messages ?? []) as UIMessage[];
        seen.push(`post:${messages.map((message) => message.role).join(',')}`);
        return fetch(input, init);
      },
    });
    this.seen = seen;
  }
  private readonly seen: string[];
  protected override processResponseStream(stream: ReadableStream<Uint8Array>) {
    return super.processResponseStream(stream).pipeThrough(
      new TransformStream<UIMessageChunk, UIMessageChunk>({
        transform: (chunk, controller) => {
          this.seen.push(chunk.type);
          controller.enqueue(chunk);
        },
      }),
    );
  }
}

/**
 * The `ai` package's `Chat` machinery (what `useChat` wraps) over DefaultChatTransport on POST
 * /api/chat: the response ends at the approval request, the page shows an Approve button (the test
 * clicks it), `addToolApprovalResponse` answers it and the next request, with the whole history,
 * streams the rest of the turn into the same assistant message; the cancel is `stop()`.
 */
async function aiSdkFlow(url: string, chatId: string): Promise<Flow> {
  const seen: string[] = [];
  let approvals = 0;
  let stopOnText = false;
  const view = section('ai-sdk');
  const changes = new Set<() => void>();
  const render = (state: PageChatState) => {
    view.replaceChildren(
      ...state.messages.flatMap((message) =>
        message.parts.flatMap((part) => {
          if (part.type === 'text') return [line(message.role === 'user' ? 'user' : 'text', part.text)];
          if (part.type === 'reasoning') return [line('reasoning', part.text)];
          if (!isToolUIPart(part)) return [];
          const name = getToolName(part);
          const shown = [line('tool-call', `${name} ${JSON.stringify(part.input ?? {})} (${part.state})`)];
          if (part.state === 'approval-requested') {
            const { id } = part.approval;
            shown.push(
              approveButton(name, () => {
                approvals += 1;
                void chat.addToolApprovalResponse({ id, approved: true });
              }),
            );
          }
          if (part.state === 'output-available') shown.push(line('tool', JSON.stringify(part.output)));
          return shown;
        }),
      ),
    );
    const last = state.messages.at(-1);
    if (stopOnText && last?.role === 'assistant' && last.parts.some((part) => part.type === 'text')) {
      stopOnText = false;
      setTimeout(() => void chat.stop());
    }
    for (const change of changes) change();
  };
  /** Resolves once the chat is `ready` with `done` true (every change is a chance), rejects on an error. */
  const settled = (done: () => boolean) =>
    new Promise<void>((resolve, reject) => {
      const check = () => {
        if (chat.status === 'error' && chat.error) reject(chat.error);
        else if (chat.status === 'ready' && done()) resolve();
        else return;
        changes.delete(check);
      };
      changes.add(check);
      check();
    });
  const chat: PageChat = new PageChat(
    {
      id: chatId,
      transport: new WatchedTransport(url, seen),
      sendAutomaticallyWhen: lastAssistantMessageIsCompleteWithApprovalResponses,
      onFinish: ({ isAbort }) => {
        if (isAbort) seen.push('aborted');
      },
    },
    render,
  );
  const toolStates = () =>
    (chat.lastMessage?.parts ?? []).filter(isToolUIPart).map((part) => part.state as string);

  await chat.sendMessage({ text: 'think: run: echo from-ai-sdk' });
  if (chat.error) throw chat.error;
  // The user answers the approval on the page; the answer and the rest of the turn go on their own.
  await settled(
    () => !toolStates().some((state) => state === 'approval-requested' || state === 'approval-responded'),
  );
  seen.push(...(chat.lastMessage?.parts ?? []).map((part) => `part:${part.type}`));
  seen.push(`roles:${chat.messages.map((message) => message.role).join(',')}`);

  stopOnText = true;
  await chat.sendMessage({ text: 'slow: cancel me' });
  if (chat.error) throw chat.error;
  return { seen, approvals };
}

Object.assign(globalThis, { eventSourceFlow, agUiFlow, aiSdkFlow, clientsReady: true });
