/**
 * Every error metis raises on purpose, in one table. Each has a stable code, an HTTP status for the
 * server, an exit code for the CLI and a hint that tells the user what to do next. Core throws these;
 * only the CLI entry point prints and exits.
 */
export interface ErrorSpec {
  readonly status: number;
  readonly exitCode: number;
  readonly hint: string;
}

export const ERROR_TABLE = {
  METIS_ERR_EVENT_VALIDATION: {
    status: 400,
    exitCode: 2,
    hint: 'Check the payload against `metis catalog --type <type>`.',
  },
  METIS_ERR_BUS_OVERFLOW: {
    status: 503,
    exitCode: 1,
    hint: 'The dispatch queue is full: a subscriber is stalled or an emit loop is running away.',
  },
  METIS_ERR_FAST_PATH_HANDLER: {
    status: 500,
    exitCode: 1,
    hint: 'Register handlers marked slow() with fastPath: false.',
  },
  METIS_ERR_INVALID_ARGUMENT: { status: 400, exitCode: 2, hint: 'Run the command with --help.' },
  METIS_ERR_UNKNOWN_EVENT_TYPE: {
    status: 400,
    exitCode: 2,
    hint: 'Run `metis catalog` to list every event type.',
  },
  METIS_ERR_DB_NOT_FOUND: { status: 404, exitCode: 1, hint: 'Pass --db with the path of a metis database.' },
  METIS_ERR_NOT_A_METIS_DB: {
    status: 400,
    exitCode: 1,
    hint: 'The file is not a metis trace database; pass --db with one written by metis.',
  },
  METIS_ERR_SCHEMA_VERSION: {
    status: 409,
    exitCode: 1,
    hint: 'Open the file with the metis version that wrote it, or restore a backup of the right version.',
  },
  METIS_ERR_DB_LOCKED: {
    status: 409,
    exitCode: 1,
    hint: 'Stop the other metis process first, or pass --db to use another database.',
  },
  METIS_ERR_DEST_EXISTS: { status: 409, exitCode: 1, hint: 'Choose a path that does not exist yet.' },
  METIS_ERR_COPY_MISMATCH: {
    status: 500,
    exitCode: 1,
    hint: 'The destination does not hold what the source does: remove it and copy again; if it repeats, report it.',
  },
  METIS_ERR_RESTORE_REFUSED: { status: 409, exitCode: 1, hint: 'See the message for what to fix.' },
  METIS_ERR_INTEGRITY: {
    status: 500,
    exitCode: 1,
    hint: 'The file is damaged; restore an older backup.',
  },
  /** Kept for `metis trace prune` (retention.ts) until it moves to METIS_ERR_STORAGE_BUSY; same meaning. */
  METIS_ERR_STORAGE_BUSY: {
    status: 503,
    exitCode: 1,
    hint: 'Another process holds the database write lock; metis retries by itself. Find it with `fuser <db>` or try again later.',
  },
  METIS_ERR_STORAGE_FULL: {
    status: 507,
    exitCode: 1,
    hint: 'Free space on the disk that holds the database; metis resumes writing by itself once there is room.',
  },
  METIS_ERR_STORAGE_IO: {
    status: 503,
    exitCode: 1,
    hint: 'The disk reported an I/O error; check the disk and the system log. metis retries by itself.',
  },
  METIS_ERR_STORE_UNUSABLE: {
    status: 503,
    exitCode: 2,
    hint: 'Fix the PostgreSQL URL (--store, $METIS_STORE_URL or store.url in config): host, port, user, password, database.',
  },
  METIS_ERR_STORE_UNAVAILABLE: {
    status: 503,
    exitCode: 1,
    hint: 'The PostgreSQL store is unreachable; metis keeps what it has and sends it when the database is back. Try again then.',
  },
  METIS_ERR_BROKER_UNREACHABLE: {
    status: 503,
    exitCode: 2,
    hint: 'Start the NATS server, or fix cluster.nats (--nats, $METIS_NATS_URL): host, port, credentials.',
  },
  METIS_ERR_NODE_ID_TAKEN: {
    status: 409,
    exitCode: 2,
    hint: 'Give this node another name (cluster.node_id or --node-id), or stop the node that has it.',
  },
  METIS_ERR_SESSION_ELSEWHERE: {
    status: 409,
    exitCode: 1,
    hint: 'Send the request to the node named in the message: it runs this session (docs/scale-out.md).',
  },
  METIS_ERR_CLUSTER_CONFIG: {
    status: 400,
    exitCode: 2,
    hint: 'A cluster needs a PostgreSQL store shared by its nodes: set store.url (or --store, $METIS_STORE_URL).',
  },
  METIS_ERR_STORE_DIVERGED: {
    status: 409,
    exitCode: 2,
    hint: 'Move the working copy aside (its events stay readable with `metis export --db <file>`) and start again.',
  },
  METIS_ERR_SESSION_NOT_FOUND: { status: 404, exitCode: 1, hint: 'List sessions with `metis sessions`.' },
  METIS_ERR_TURN_IN_FLIGHT: {
    status: 409,
    exitCode: 1,
    hint: 'Wait for the current turn to finish or cancel it first.',
  },
  METIS_ERR_CHAT_HISTORY_DIVERGED: {
    status: 409,
    exitCode: 1,
    hint: 'metis keeps the conversation and does not rewrite it: send the history it has (GET /sessions/{id}/messages), or start a new chat (a new chat id).',
  },
  METIS_ERR_INVALID_FILTER: {
    status: 400,
    exitCode: 2,
    hint: 'Use preset:chat, preset:full or event types from `metis catalog`; session_ids may only narrow the stream to the session and its workers.',
  },
  METIS_ERR_NO_RECOMMENDATION: {
    status: 409,
    exitCode: 1,
    hint: 'A pattern recommendation is pending only while the turn it was deferred in runs (apply) or until the next turn (dismiss); see `metis tail <session> --preset full`.',
  },
  METIS_ERR_TURN_NOT_FOUND: {
    status: 404,
    exitCode: 1,
    hint: 'Check the turn id; only the current turn can be cancelled.',
  },
  METIS_ERR_CONFIRMATION_NOT_FOUND: {
    status: 404,
    exitCode: 1,
    hint: 'The confirmation was already answered, timed out, or never existed.',
  },
  METIS_ERR_CONFIRMATION_MISMATCH: {
    status: 409,
    exitCode: 1,
    hint: 'The input_hash sent is not the hash of the pending input: nothing was decided. List it again (`metis confirm <session>`) and answer what is shown.',
  },
  METIS_ERR_INVALID_MODEL: {
    status: 400,
    exitCode: 2,
    hint: 'Use "provider:name" with a configured provider, e.g. scripted:demo.',
  },
  METIS_ERR_CONFIG_INVALID: {
    status: 400,
    exitCode: 2,
    hint: 'Fix the file named in the message; `metis config show` prints what is in effect.',
  },
  METIS_ERR_PLUGIN_NOT_FOUND: {
    status: 500,
    exitCode: 2,
    hint: 'Check the plugin name in config: a built-in (jsonl-sink, webhook, otel), an installed package or a path relative to the config file.',
  },
  METIS_ERR_PLUGIN_EXPORT: {
    status: 500,
    exitCode: 2,
    hint: 'A plugin module must default-export { name, optionsSchema?, create(options, ctx) } (see docs/plugins.md).',
  },
  METIS_ERR_PLUGIN_OPTIONS: {
    status: 500,
    exitCode: 2,
    hint: "Fix the plugin's options in the config file; docs/plugins.md lists those of the built-ins.",
  },
  METIS_ERR_PLUGIN_START: {
    status: 500,
    exitCode: 1,
    hint: 'The plugin failed while loading or starting; see the message, or remove it from `plugins` in config.',
  },
  /** A plugin's synchronous trace read that the host cannot answer exactly here (docs/plugins.md). */
  METIS_ERR_TRACE_READ_REFUSED: {
    status: 500,
    exitCode: 1,
    hint: 'The trace is not in a file of this process: read it through ctx.store.async, which answers on every store.',
  },
  // 124 as timeout(1) reports a command it stopped: a script tells "gave up" from "failed".
  METIS_ERR_FOLLOW_TIMEOUT: {
    status: 504,
    exitCode: 124,
    hint: 'The turn goes on on the server: `metis tail <session>` follows it, `metis cancel <session>` stops it.',
  },
  METIS_ERR_SERVER_UNREACHABLE: {
    status: 503,
    exitCode: 1,
    hint: 'Start one with `metis serve`, or pass --url (or METIS_URL) to point at a running server.',
  },
  METIS_ERR_REQUEST_FAILED: {
    status: 502,
    exitCode: 1,
    hint: 'See the message for what the server refused.',
  },
  METIS_ERR_SESSION_ENDED: { status: 409, exitCode: 1, hint: 'Create a new session.' },
  METIS_ERR_SERVER_DRAINING: {
    status: 503,
    exitCode: 1,
    hint: 'The server is stopping and keeps its running turns for its next start: send the message again once it is back.',
  },
  METIS_ERR_LISTEN: {
    status: 500,
    exitCode: 1,
    hint: 'Stop the process using that port, or pass --port (0 picks a free one) or --host.',
  },
  METIS_ERR_TOO_MANY_ATTEMPTS: {
    status: 429,
    exitCode: 1,
    hint: 'Too many requests with a wrong token came from this address: wait Retry-After seconds, then use the token in $METIS_HOME/token (or $METIS_TOKEN).',
  },
} as const satisfies Record<string, ErrorSpec>;

export type ErrorCode = keyof typeof ERROR_TABLE;

export class MetisError extends Error {
  readonly code: ErrorCode;
  readonly status: number;
  readonly exitCode: number;
  readonly hint: string;

  constructor(code: ErrorCode, message: string, options?: { cause?: unknown; hint?: string }) {
    super(message, options?.cause === undefined ? undefined : { cause: options.cause });
    const spec: ErrorSpec = ERROR_TABLE[code];
    this.name = 'MetisError';
    this.code = code;
    this.status = spec.status;
    this.exitCode = spec.exitCode;
    this.hint = options?.hint ?? spec.hint;
  }
}

/** Raised by `emit` in strict mode for an unknown type or a payload that fails its schema. */
export class EventValidationError extends MetisError {
  readonly eventType: string;
  readonly issues: readonly { path: string; message: string }[];

  constructor(eventType: string, issues: readonly { path: string; message: string }[], message: string) {
    super(issues.length === 0 ? 'METIS_ERR_UNKNOWN_EVENT_TYPE' : 'METIS_ERR_EVENT_VALIDATION', message);
    this.name = 'EventValidationError';
    this.eventType = eventType;
    this.issues = issues;
  }
}

/** Raised by `emit` when the dispatch queue is at its bound (bus spec §3.5). */
export class EventBusOverflowError extends MetisError {
  constructor(bound: number) {
    super('METIS_ERR_BUS_OVERFLOW', `event bus dispatch queue is full (${bound} events)`);
    this.name = 'EventBusOverflowError';
  }
}

/** Raised by `subscribe` when a handler marked slow() asks for the fast path (bus spec §3.4). */
export class FastPathHandlerError extends MetisError {
  constructor(subscriptionName: string) {
    super(
      'METIS_ERR_FAST_PATH_HANDLER',
      `subscription "${subscriptionName}" has a handler marked slow() and cannot run on the fast path`,
    );
    this.name = 'FastPathHandlerError';
  }
}

export function isMetisError(error: unknown): error is MetisError {
  return error instanceof MetisError;
}
