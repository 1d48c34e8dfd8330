import { Agent as HttpAgent, request as httpRequest, type IncomingMessage } from 'node:http';
import { Agent as HttpsAgent, request as httpsRequest } from 'node:https';
import { createParser, type EventSourceMessage } from 'eventsource-parser';
import type OpenAI from 'openai';
import { APIConnectionError, APIConnectionTimeoutError, APIError, APIUserAbortError } from 'openai';

/**
 * One streamed chat completion over node:http(s), its SSE read by `eventsource-parser`: what the SDK's
 * `chat.completions.create({stream: true})` does, without its per-request machinery. Measured against
 * the same local upstream, the SDK took 1.4 ms to its first chunk and this 0.45 ms (docs/gateway.md
 * "Latency"): the SDK goes through `fetch` (undici's WHATWG streams) and builds a request object,
 * headers and a retry loop metis does not use (its retries are retry.ts's). Failures are the SDK's
 * own error classes, built as the SDK builds them (`APIError.generate` from the status, the parsed
 * body and the headers), so error-mapping.ts classifies them exactly as before.
 */

/** What the SDK allows a request before its answer begins (`OpenAI.DEFAULT_TIMEOUT`). */
const HEADERS_TIMEOUT_MS = 600_000;

/**
 * Connections kept open between calls (a new TCP connection costs 0.3 ms and more; TLS far more), with
 * the options of node's own global agent: a free socket is closed after 5 s idle, or earlier when the
 * server's `Keep-Alive: timeout` hint says so, so a reused socket is rarely one the server dropped.
 */
const AGENT_OPTIONS = { keepAlive: true, scheduling: 'lifo', timeout: 5_000 } as const;
const httpAgent = new HttpAgent(AGENT_OPTIONS);
const httpsAgent = new HttpsAgent(AGENT_OPTIONS);

export interface ChatStreamCall {
  /** The client whose base URL, key, organization and project the request carries. */
  readonly client: OpenAI;
  readonly params: OpenAI.ChatCompletionCreateParamsStreaming;
  readonly signal: AbortSignal;
}

export interface ChatStream {
  /** The provider's `x-request-id`, null without one. */
  readonly requestId: string | null;
  readonly chunks: AsyncGenerator<OpenAI.ChatCompletionChunk, void, void>;
}

/**
 * Sends the request and resolves once the answer's status and headers came: an HTTP error is thrown
 * as the SDK's error for its status; a 2xx answer is read as `chunks`. An abort before the answer is
 * `APIUserAbortError`; an abort while reading ends `chunks` quietly, as the SDK's stream does.
 */
export async function openChatStream(call: ChatStreamCall): Promise<ChatStream> {
  const { client, signal } = call;
  if (signal.aborted) throw new APIUserAbortError();
  const url = new URL(chatCompletionsUrl(client.baseURL));
  const body = JSON.stringify(call.params);
  const headers: Record<string, string> = {
    accept: 'application/json',
    'content-type': 'application/json',
    'content-length': String(Buffer.byteLength(body)),
    authorization: `Bearer ${client.apiKey}`,
  };
  if (client.organization) headers['openai-organization'] = client.organization;
  if (client.project) headers['openai-project'] = client.project;
  const secure = url.protocol === 'https:';
  const request = (secure ? httpsRequest : httpRequest)(url, {
    method: 'POST',
    headers,
    agent: secure ? httpsAgent : httpAgent,
  });
  const abort = () => request.destroy(new APIUserAbortError());
  signal.addEventListener('abort', abort, { once: true });
  let response: IncomingMessage;
  try {
    response = await answerOf(request, body);
  } catch (error) {
    signal.removeEventListener('abort', abort);
    if (signal.aborted || error instanceof APIUserAbortError) throw new APIUserAbortError();
    if (error instanceof APIConnectionTimeoutError) throw error;
    throw new APIConnectionError({ message: 'Connection error.', cause: error as Error });
  }
  const responseHeaders = headersOf(response);
  const status = response.statusCode ?? 0;
  if (status < 200 || status > 299) {
    try {
      const text = await textOf(response);
      const json = parsedOrUndefined(text);
      throw APIError.generate(status, json, json === undefined ? text : undefined, responseHeaders);
    } finally {
      signal.removeEventListener('abort', abort);
    }
  }
  return {
    requestId: responseHeaders.get('x-request-id'),
    chunks: chunksOf(response, responseHeaders, signal, () => {
      signal.removeEventListener('abort', abort);
      // Left before its end (a cancel, a failure): the connection goes, not back to the pool.
      if (!response.complete) request.destroy();
    }),
  };
}

/** The SDK's URL of `POST /chat/completions` under a base URL (with or without its trailing slash). */
function chatCompletionsUrl(baseURL: string): string {
  return baseURL.endsWith('/') ? `${baseURL}chat/completions` : `${baseURL}/chat/completions`;
}

function answerOf(request: ReturnType<typeof httpRequest>, body: string): Promise<IncomingMessage> {
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => request.destroy(new APIConnectionTimeoutError()), HEADERS_TIMEOUT_MS);
    timer.unref();
    request.once('response', (response) => {
      clearTimeout(timer);
      resolve(response);
    });
    request.once('error', (error) => {
      clearTimeout(timer);
      reject(error);
    });
    request.end(body);
  });
}

async function* chunksOf(
  response: IncomingMessage,
  headers: Headers,
  signal: AbortSignal,
  release: () => void,
): AsyncGenerator<OpenAI.ChatCompletionChunk, void, void> {
  const events: EventSourceMessage[] = [];
  const parser = createParser({ onEvent: (event) => events.push(event) });
  let done = false;
  response.setEncoding('utf8');
  try {
    for await (const text of response) {
      parser.feed(text as string);
      while (events.length > 0) {
        const event = events.shift()!;
        if (done) continue;
        // As the SDK reads a chat stream: `[DONE]` ends it, a chunk with `error` is the provider's
        // failure mid-answer, anything else is a chunk (an unparsable one throws, as there).
        if (event.data.startsWith('[DONE]')) {
          done = true;
          continue;
        }
        const data = JSON.parse(event.data) as OpenAI.ChatCompletionChunk & { error?: unknown };
        if (data?.error) throw new APIError(undefined, data.error as object, undefined, headers);
        yield data;
      }
    }
  } catch (error) {
    if (signal.aborted) return;
    throw error;
  } finally {
    release();
  }
}

function headersOf(response: IncomingMessage): Headers {
  const headers = new Headers();
  for (const [name, value] of Object.entries(response.headers)) {
    if (value === undefined) continue;
    for (const one of Array.isArray(value) ? value : [value]) headers.append(name, one);
  }
  return headers;
}

async function textOf(response: IncomingMessage): Promise<string> {
  response.setEncoding('utf8');
  let text = '';
  for await (const part of response) text += part as string;
  return text;
}

/** The error body as the SDK reads it (its `safeJSON`): parsed, or undefined and the text is the message. */
function parsedOrUndefined(text: string): object | undefined {
  try {
    return JSON.parse(text) as object;
  } catch {
    return undefined;
  }
}
