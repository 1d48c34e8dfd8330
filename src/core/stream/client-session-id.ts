import { z } from 'zod';

/**
 * A session id a client chooses (an AI SDK chat id, an AG-UI thread id): it names the metis session,
 * created on first use, so it must be safe in a path and a log line.
 */
export const ClientSessionId = z
  .string()
  .min(1)
  .max(100)
  .regex(/^[A-Za-z0-9_-]+$/, 'must be letters, digits, "_" or "-" (it names the metis session)');
