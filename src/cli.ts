import { Command, CommanderError } from 'commander';
import { visibleJson, visibleText } from './client/visible-text.js';
import { ExitError } from './commands/exit-error.js';
import { registerGatewayCommands } from './commands/gateway-register.js';
import { registerCommands } from './commands/register.js';
import { registerUserCommands } from './commands/user-register.js';
import { isMetisError } from './core/errors.js';
import { asStorageError } from './core/store/storage-errors.js';
import { packageVersion } from './core/version.js';

/** `json`: the command line asks for `--json`, so a usage error is printed as JSON too. */
export function buildProgram(json = false): Command {
  const program = new Command('metis')
    .description('The event spine of an AI agent runtime: event catalog, trace store, streaming server.')
    .version(packageVersion(), '-v, --version', 'print the metis version')
    .showHelpAfterError(json ? false : '(run with --help for usage)')
    .exitOverride();
  if (json) {
    program.configureOutput({
      outputError: (text, write) =>
        write(
          `${errorJson('METIS_ERR_INVALID_ARGUMENT', text.replace(/^error: /, '').trim(), 'Run the command with --help.', 2)}\n`,
        ),
    });
  }
  registerCommands(program);
  registerGatewayCommands(program);
  registerUserCommands(program);
  return program;
}

/**
 * A reader that went away (`metis tail … | head -1`) ends the command quietly and successfully: there is
 * nobody left to print to, and a stack trace would land in the user's terminal (docs/decisions.md
 * "A closed pipe"). Any other error of the standard streams stays a crash.
 */
function endQuietlyOnClosedPipe(): void {
  for (const stream of [process.stdout, process.stderr]) {
    stream.on('error', (error: NodeJS.ErrnoException) => {
      if (error.code !== 'EPIPE') throw error;
      process.exit(typeof process.exitCode === 'number' ? process.exitCode : 0);
    });
  }
}

/** The only place that prints a failure and exits (commands and core throw). */
export async function run(argv: readonly string[]): Promise<void> {
  endQuietlyOnClosedPipe();
  // Before parsing, so that a usage error of a `--json` command line is JSON too.
  const json = argv.slice(2).includes('--json');
  const program = buildProgram(json);
  try {
    await program.parseAsync(argv);
  } catch (error) {
    process.exitCode = exitCodeFor(error, json);
  }
}

/** A failure as one JSON line on stderr, for scripts that asked for `--json`. */
function errorJson(code: string, message: string, hint: string | undefined, exitCode: number): string {
  return visibleJson(
    JSON.stringify({ error: { code, message, ...(hint ? { hint } : {}), exit_code: exitCode } }),
  );
}

function exitCodeFor(thrown: unknown, json: boolean): number {
  if (thrown instanceof ExitError) return thrown.exitCode;
  // A full disk, a lock held too long or an I/O error is the operator's to fix, not a metis bug.
  const error = asStorageError(thrown);
  if (error instanceof CommanderError) {
    // commander already printed help, the version or its usage error.
    return error.exitCode === 0 ? 0 : 2;
  }
  if (isMetisError(error)) {
    if (json) {
      console.error(errorJson(error.code, error.message, error.hint, error.exitCode));
      return error.exitCode;
    }
    // A message may quote a server's answer or a model's words: what reaches the terminal must not act.
    console.error(`error: ${visibleText(error.message)}`);
    if (error.hint) console.error(`hint: ${visibleText(error.hint)}`);
    return error.exitCode;
  }
  const detail = error instanceof Error ? (error.stack ?? error.message) : String(error);
  if (json) {
    console.error(
      errorJson(
        'METIS_ERR_INTERNAL',
        `internal error (this is a bug in metis; please report it): ${detail}`,
        undefined,
        70,
      ),
    );
    return 70;
  }
  console.error(`error: internal error (this is a bug in metis; please report it)\n${detail}`);
  return 70;
}
