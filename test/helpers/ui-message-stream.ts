import { readUIMessageStream, type UIMessage, type UIMessageChunk } from 'ai';

/**
 * Reads an AI SDK UI message stream as `useChat` does: each chunk's type as it comes, and the message
 * the `ai` package builds from them, once the stream has ended.
 */
export function readChatStream(stream: ReadableStream<UIMessageChunk>): {
  readonly chunks: string[];
  readonly done: Promise<UIMessage | undefined>;
} {
  const chunks: string[] = [];
  const [forChunks, forMessages] = stream.tee();
  const reading = (async () => {
    const reader = forChunks.getReader();
    for (;;) {
      const { done, value } = await reader.read();
      if (done) return;
      chunks.push(value.type);
    }
  })();
  let last: UIMessage | undefined;
  const messages = (async () => {
    for await (const message of readUIMessageStream({ stream: forMessages })) last = message;
  })();
  return { chunks, done: Promise.all([reading, messages]).then(() => last) };
}
