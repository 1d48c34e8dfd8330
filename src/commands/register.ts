import { Argument, type Command, Option } from 'commander';
import { FAULT_NAMES } from '../core/stream/faults.js';
import { registerStoreCommands } from './register-store.js';
import { registerSkillsCommands } from './skills-register.js';

/**
 * Registers every command. Each action imports its module only when it runs, so one command never
 * loads another's dependencies (the SQLite binding, the server).
 */
/** Where a client command finds the server; shared by every command that talks to one. */
const urlOption = () =>
  new Option(
    '--url <url>',
    "server URL (default $METIS_URL, else the config's server.host and server.port, else http://127.0.0.1:8421)",
  );
const tokenOption = () =>
  new Option(
    '--token <token>',
    "bearer token (default $METIS_TOKEN, else the config's server.bearer_token, else the file $METIS_HOME/token that metis serve writes)",
  );
const clientConfigOption = () =>
  new Option(
    '--config <file>',
    'config file giving the server address and token (default: metis.config.* or .metisrc* found from here up)',
  );

export function registerCommands(program: Command): void {
  program
    .command('catalog')
    .description('print the event contract: every catalog and streaming-only event type')
    .option('--json', 'print JSON (one object with a `types` array) instead of a table')
    .option('--domain <domain>', 'only types of this domain, e.g. tool, route, message')
    .option('--type <type>', "one type, with its payload's fields (JSON Schema)")
    .action(async (options) => (await import('./catalog.js')).catalogCommand(options));

  program
    .command('serve')
    .description('run the event bus, trace store, agent runtime and streaming server')
    .option('--host <host>', 'address to bind (default 127.0.0.1; others need server.bearer_token)')
    .option('--port <port>', 'port to listen on (default 8421; 0 picks a free port)')
    .option('--db <file>', 'database file (default $METIS_HOME/metis.db, ~/.metis/metis.db)')
    .option(
      '--store <url>',
      'run on a PostgreSQL store, postgres://user:pass@host:port/db (default $METIS_STORE_URL, then store.url in config); a working copy is kept beside --db',
    )
    .option(
      '--nats <url>',
      'join a cluster through this NATS broker, nats://host:port (default $METIS_NATS_URL, then cluster.nats in config); needs a PostgreSQL store',
    )
    .option(
      '--node-id <id>',
      "this node's name in the cluster (default cluster.node_id, else the host name and a hash of the data folder)",
    )
    .option(
      '--advertise-url <url>',
      'the URL other nodes and `metis cluster status` show for this node (default cluster.advertise_url, else its own URL, with the host name for 0.0.0.0)',
    )
    .option('--model <model>', 'default model as provider:name (default scripted:demo)')
    .option('--config <file>', 'config file (default: metis.config.* or .metisrc* found from here up)')
    .option('--json', 'print the startup line as JSON (url, db, config, node)')
    .option('--conformance', 'enable the test-only hooks of docs/conformance.md (never in production)')
    .addOption(
      new Option('--fault <name...>', 'with --conformance: break one guarantee on purpose').choices(
        Object.keys(FAULT_NAMES),
      ),
    )
    .action(async (options) => (await import('./serve.js')).serveCommand(options));

  program
    .command('demo')
    .description('run an embedded server on a temporary database and watch one scripted turn live')
    .option('--message <text>', 'the message to send (default "think: time": thinks, calls a tool, answers)')
    .option('--keep', 'keep the temporary database instead of deleting it')
    .option('--json', "print the turn's frames as JSON lines (as send --follow --json)")
    .action(async (options) => (await import('./demo.js')).demoCommand(options));

  program
    .command('chat [session]')
    .description(
      'talk to a session in the terminal: a prompt per message, turns streamed, approvals answered in place',
    )
    .option('--model <model>', 'pin this model for the session (provider:name)')
    .addOption(urlOption())
    .addOption(tokenOption())
    .addOption(clientConfigOption())
    .addHelpText(
      'after',
      '\nWithout a session a new one starts; with one, its last messages are shown first.\nAt the prompt: /model [model], /cancel, /help, /exit (or Ctrl-D, Esc). During a turn: Ctrl-C\ncancels it, a second Ctrl-C leaves. Needs a terminal; scripts use `metis send --follow`.',
    )
    .action(async (session, options) => (await import('./chat.js')).chatCommand(session, options));

  program
    .command('doctor')
    .description(
      'check that metis serve can run here: config, database, PostgreSQL store (when set), port, provider keys and addresses, plugins',
    )
    .option('--config <file>', 'config file (default: metis.config.* or .metisrc* found from here up)')
    .option('--json', 'print { ok, checks: [{ name, status, detail, hint }] }')
    .addHelpText('after', '\nExit status: 0 ready (warnings allowed), 1 a problem would stop metis serve.')
    .action(async (options) => (await import('./doctor.js')).doctorCommand(options));

  program
    .command('tail <session>')
    .description('follow a session live; survives server restarts; Ctrl-C never cancels anything')
    .addOption(new Option('--preset <name>', 'chat (default) or full').choices(['chat', 'full']))
    .option('--types <list>', 'comma-separated event types instead of a preset')
    .option('--since <id>', 'resume after this event id (replay, no snapshot)')
    .option('--no-snapshot', 'start live, without the snapshot of the session')
    .option('--workers', "include the session's worker sessions")
    .option('--json', 'print one frame per line (for jq)')
    .option('--timeout <duration>', 'stop after this long (90, 90s, 5m, 1h) and exit 0')
    .addOption(urlOption())
    .addOption(tokenOption())
    .addOption(clientConfigOption())
    .action(async (session, options) => (await import('./tail.js')).tailCommand(session, options));

  program
    .command('send [session] [message]')
    .description('send a message to a session (or --new to create one) and optionally follow the turn')
    .option('--new', 'create a new session; the first argument is then the message')
    .option('--model <model>', 'model for this message only (provider:name)')
    .option('--follow', 'stream the turn until it ends')
    .option('--json', 'print JSON (ids, or frames with --follow)')
    .option('--detach', 'with --follow: Ctrl-C stops following and leaves the turn running')
    .option(
      '--timeout <duration>',
      'with --follow: stop following after this long (90, 90s, 5m, 1h); exit 124, the turn goes on',
    )
    .addOption(urlOption())
    .addOption(tokenOption())
    .addOption(clientConfigOption())
    .addHelpText(
      'after',
      '\nWith --follow, Ctrl-C cancels the turn and shows its end; a second Ctrl-C (or the first with\n--detach) stops following and leaves the turn to the server.\n\nExit status with --follow: 0 the turn completed, 1 it failed (its last model call failed, or no\nmodel could serve it), 3 it was cancelled, 124 --timeout passed first, 130 interrupted (the turn\ngoes on in both).',
    )
    .action(async (session, message, options) =>
      (await import('./send.js')).sendCommand(session, message, options),
    );

  program
    .command('sessions')
    .description('list sessions of a running server')
    .option('--json', 'print JSON')
    .option('--all', 'include the sessions `metis conformance run` made')
    .addOption(urlOption())
    .addOption(tokenOption())
    .addOption(clientConfigOption())
    .action(async (options) => (await import('./session-commands.js')).sessionsCommand(options));

  program
    .command('cancel <session> [turn]')
    .description("cancel a turn (default: the session's turn in flight)")
    .option('--json', 'print JSON')
    .addOption(urlOption())
    .addOption(tokenOption())
    .addOption(clientConfigOption())
    .action(async (session, turn, options) =>
      (await import('./session-commands.js')).cancelCommand(session, turn, options),
    );

  program
    .command('init')
    .description(
      'write a commented metis.config.yaml: asks for the provider, model, key variable and plugins',
    )
    .addOption(
      new Option('--provider <name>', 'the models metis calls (default scripted: built in, no key)').choices([
        'scripted',
        'anthropic',
        'openai',
        'ollama',
        'openai-compatible',
      ]),
    )
    .option('--model <name>', "the model's name at the provider, without the provider: prefix")
    .option('--key-env <variable>', 'the environment variable that holds the API key (never the key itself)')
    .option('--base-url <url>', "ollama and openai-compatible: the server's /v1 URL")
    .option('--plugin <name...>', 'plugins to load: jsonl-sink, webhook, otel or a module path')
    .option('--yes', 'ask nothing: the flags given, defaults for the rest (needed without a terminal)')
    .option('--force', 'replace an existing file')
    .option('--out <file>', 'where to write (default ./metis.config.yaml)')
    .option('--json', 'print { path, provider, model, keyEnv, baseUrl, plugins, key_env_set }')
    .action(async (options) => (await import('./init.js')).initCommand(options));

  program
    .command('feedback <session>')
    .description('rate a turn (--turn) or the whole session: recorded as feedback.explicit')
    .addArgument(new Argument('<rating>', 'up or down').choices(['up', 'down']))
    .option('--turn <turn>', 'the turn rated (it must have ended); without it, the session')
    .option('--comment <text>', 'a comment kept with the rating (recorded as private)')
    .option('--json', 'print { event_id, scope, rating }')
    .addOption(urlOption())
    .addOption(tokenOption())
    .addOption(clientConfigOption())
    .action(async (session, rating, options) =>
      (await import('./feedback.js')).feedbackCommand(session, rating, options),
    );

  program
    .command('dashboard')
    .description("print a single-use sign-in link to the server's dashboard (the token stays unprinted)")
    .option('--json', 'print {url, expires_in_seconds}')
    .addOption(urlOption())
    .addOption(tokenOption())
    .addOption(clientConfigOption())
    .action(async (options) => (await import('./dashboard.js')).dashboardCommand(options));

  program
    .command('end <session>')
    .description('end a session (session.ended): its turns are scored and patterns learned from them')
    .option('--abandoned', 'record it as abandoned rather than completed')
    .option('--json', 'print { session_id, status, disposition }')
    .addOption(urlOption())
    .addOption(tokenOption())
    .addOption(clientConfigOption())
    .action(async (session, options) => (await import('./end.js')).endCommand(session, options));

  program
    .command('budget <session>')
    .description(
      'set or raise the spend caps of a session (a turn paused at a cap goes on); without a cap: show them',
    )
    .option('--usd <amount>', 'cap in USD, as the pricing table bills (none: no cap)')
    .option('--tokens <count>', 'cap in tokens (none: no cap)')
    .option('--tree', 'cap the session and the workers it delegates to, together')
    .option('--json', 'print { session, tree, paused }')
    .addOption(urlOption())
    .addOption(tokenOption())
    .addOption(clientConfigOption())
    .action(async (session, options) => (await import('./budget.js')).budgetCommand(session, options));

  const route = program
    .command('route')
    .description('act on a pattern recommendation routing deferred behind a rule or your model choice');
  for (const [action, description] of [
    [
      'override',
      'apply it: the running turn goes on with the recommended model (route.overridden); only while that turn runs',
    ],
    ['dismiss', 'keep the chosen model (pattern.override_dismissed); until the next turn starts'],
  ] as const) {
    route
      .command(`${action} <session>`)
      .description(description)
      .option('--json', 'print the answer as JSON')
      .addOption(urlOption())
      .addOption(tokenOption())
      .addOption(clientConfigOption())
      .action(async (session, options) =>
        (await import('./route.js')).routeCommand(action, session, options),
      );
  }

  program
    .command('patterns')
    .description('the pattern store of pattern routing')
    .command('clear')
    .description('forget every learned outcome (pattern.evicted, manual_clear)')
    .option('--json', 'print { entries_evicted }')
    .addOption(urlOption())
    .addOption(tokenOption())
    .addOption(clientConfigOption())
    .action(async (options) => (await import('./route.js')).patternsClearCommand(options));

  registerSkillsCommands(program, { url: urlOption, token: tokenOption });

  const memoryFileOption = () =>
    new Option('--file <file>', 'only MEMORY.md (memory) or USER.md (user); default both').choices([
      'memory',
      'user',
    ]);
  const memory = program
    .command('memory')
    .description("a workspace's memory: .metis/MEMORY.md (the agent's notes) and .metis/USER.md");
  memory
    .command('show')
    .description('print the memory files as the model gets them (read here, no server needed)')
    .option('--workspace <dir>', 'the workspace (default: the current folder)')
    .addOption(memoryFileOption())
    .option('--config <file>', 'config file giving runtime.memory.max_bytes (default: found from here up)')
    .option('--json', 'print { workspace, max_bytes, files }')
    .action(async (options) => (await import('./memory.js')).memoryShowCommand(options));
  memory
    .command('clear')
    .description('empty the memory files through the server (memory.eviction, manual)')
    .option('--workspace <dir>', 'the workspace (default: the current folder)')
    .addOption(memoryFileOption())
    .option('--yes', 'clear without asking (required: every entry goes)')
    .option('--json', 'print { cleared }')
    .addOption(urlOption())
    .addOption(tokenOption())
    .addOption(clientConfigOption())
    .action(async (options) => (await import('./memory.js')).memoryClearCommand(options));

  program
    .command('confirm <session> [request] [decision]')
    .description(
      'show the whole input of a tool call waiting for approval, then answer it: allow or deny ' +
        '(without a request: list what waits in the session and its workers)',
    )
    .option('--session', 'allow this tool for the rest of the session (default: once)')
    .option('--show', 'only show what waits, answer nothing')
    .option('--json', 'print JSON')
    .addOption(urlOption())
    .addOption(tokenOption())
    .addOption(clientConfigOption())
    .action(async (session, request, decision, options) =>
      (await import('./confirm.js')).confirmCommand(session, request, decision, options),
    );

  const conformance = program
    .command('conformance')
    .description('protocol conformance suites (docs/conformance.md)');
  conformance
    .command('run')
    .description('check a server against the streaming protocol (default: an embedded server)')
    .option('--url <url>', 'server to test (it needs `metis serve --conformance` for the hook checks)')
    .option(
      '--sessions-url <url>',
      "with --url: make each check's session on this server instead (a cluster node), so that its turns run there while the client talks to --url; same token",
    )
    .option('--only <name...>', 'run only these checks (the invariant checks always run)')
    .option('--json', 'print every result as JSON')
    .option('--junit <file>', 'also write a JUnit XML report')
    .addOption(
      new Option(
        '--transport <transport>',
        'run the checks over the WebSocket or over server-sent events (GET /sessions/{id}/events); checks of WebSocket-only features are skipped over SSE',
      )
        .choices(['websocket', 'sse'])
        .default('websocket'),
    )
    .addOption(
      new Option(
        '--fault <name...>',
        'embedded server only: break a guarantee on purpose to see checks fail',
      ).choices(Object.keys(FAULT_NAMES)),
    )
    .addOption(tokenOption())
    .action(async (options) => (await import('./conformance.js')).conformanceRunCommand(options));
  conformance
    .command('client')
    .description(
      'feed the recorded server traces (streaming spec §11.3) to a client and compare its final state with the expected one',
    )
    .option(
      '--cmd <command>',
      'external client to check: a shell command that reads frames as JSONL on stdin and prints its final state as JSON (default: the built-in reducer)',
    )
    .option('--traces <dir>', "folder of <name>.jsonl + <name>.expected.json traces (default: metis's own)")
    .option('--only <name...>', 'check only these traces')
    .option('--timeout <ms>', 'time one run of --cmd may take', '10000')
    .option('--json', 'print every result as JSON')
    .action(async (options) => (await import('./conformance.js')).conformanceClientCommand(options));

  const config = program.command('config').description('the configuration in effect');
  config
    .command('show')
    .description('print the resolved config (defaults applied, secrets redacted) and the file it came from')
    .option('--json', 'print JSON: { file, config }')
    .option('--config <file>', 'config file (default: metis.config.* or .metisrc* found from here up)')
    .action(async (options) => (await import('./config-show.js')).configShowCommand(options));

  program
    .command('plugins')
    .description('list the plugins with their filter and path, and their counts when a server runs')
    .option('--json', 'print JSON')
    .option('--config <file>', 'config file (default: metis.config.* or .metisrc* found from here up)')
    .option('--url <url>', 'server URL (default $METIS_URL, else the configured host and port)')
    .addOption(tokenOption())
    .action(async (options) => (await import('./plugins.js')).pluginsCommand(options));

  registerStoreCommands(program);
}
