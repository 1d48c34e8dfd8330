import { existsSync, rmSync, writeFileSync } from 'node:fs';
import { resolve } from 'node:path';
import { cancel, intro, isCancel, log, outro, select, text } from '@clack/prompts';
import { visibleText } from '../client/visible-text.js';
import { loadConfig } from '../core/config/load-config.js';
import { MetisError } from '../core/errors.js';
import { ExitError } from './exit-error.js';
import {
  type InitAnswers,
  PROVIDER_CHOICES,
  PROVIDER_DEFAULTS,
  type ProviderChoice,
  renderConfig,
} from './init-template.js';

export interface InitOptions {
  provider?: ProviderChoice;
  model?: string;
  keyEnv?: string;
  baseUrl?: string;
  plugin?: string[];
  yes?: boolean;
  force?: boolean;
  out?: string;
  json?: boolean;
}

const KEY_ENV = /^[A-Za-z_][A-Za-z0-9_]*$/;

/**
 * `metis init`: writes a commented `metis.config.yaml` after asking for the provider, the model, the
 * variable holding the key and the plugins; with `--yes` (or flags) it asks nothing. The file is checked
 * against metis's own schema and loaded back before the command says it is done.
 */
export async function initCommand(options: InitOptions): Promise<void> {
  const path = resolve(options.out ?? 'metis.config.yaml');
  if (existsSync(path) && !options.force) {
    throw new MetisError('METIS_ERR_DEST_EXISTS', `${path} already exists; pass --force to replace it`);
  }
  const interactive = !options.yes && process.stdin.isTTY === true && process.stdout.isTTY === true;
  if (!interactive && !options.yes) {
    throw new MetisError(
      'METIS_ERR_INVALID_ARGUMENT',
      'metis init asks its questions on a terminal; without one pass --yes, with --provider, --model, --key-env, --base-url and --plugin for what the defaults do not fit',
    );
  }
  const answers = interactive ? await ask(options) : fromFlags(options);
  if (answers.keyEnv !== null && !KEY_ENV.test(answers.keyEnv))
    throw new MetisError(
      'METIS_ERR_INVALID_ARGUMENT',
      `--key-env: "${answers.keyEnv}" is not a variable name`,
    );
  writeFileSync(path, renderConfig(answers), { mode: 0o644 });
  try {
    await loadConfig({ explicitPath: path });
  } catch (error) {
    rmSync(path, { force: true }); // never leave a config behind that metis serve would refuse
    throw error;
  }
  const keySet = answers.keyEnv === null ? null : Boolean(process.env[answers.keyEnv]);
  if (options.json) {
    console.log(JSON.stringify({ path, ...answers, key_env_set: keySet }));
    return;
  }
  const keyNote =
    keySet === null
      ? ''
      : keySet
        ? `\n${answers.keyEnv} is set in this shell.`
        : `\n${answers.keyEnv} is not set in this shell: export it before metis serve.`;
  const next = `wrote ${path}${keyNote}\nnext: metis doctor (checks it), then metis serve`;
  if (interactive) outro(visibleText(next));
  else console.log(visibleText(next));
}

function fromFlags(options: InitOptions): InitAnswers {
  const provider = options.provider ?? 'scripted';
  const defaults = PROVIDER_DEFAULTS[provider];
  return {
    provider,
    model: options.model ?? defaults.model,
    keyEnv: options.keyEnv ?? defaults.keyEnv,
    baseUrl: options.baseUrl ?? defaults.baseUrl,
    plugins: options.plugin ?? [],
  };
}

/** Ctrl-C or Esc at a question: nothing is written. */
function answered<T>(value: T): Exclude<T, symbol> {
  if (isCancel(value)) {
    cancel('init cancelled, nothing written');
    throw new ExitError(130);
  }
  return value as Exclude<T, symbol>;
}

async function ask(options: InitOptions): Promise<InitAnswers> {
  intro('metis init');
  const provider =
    options.provider ??
    answered(
      await select<ProviderChoice>({
        message: 'Which models will metis call?',
        options: PROVIDER_CHOICES.map((value) => ({ value, label: PROVIDER_DEFAULTS[value].label })),
        initialValue: 'scripted',
      }),
    );
  const defaults = PROVIDER_DEFAULTS[provider];
  const model =
    options.model ??
    answered(
      await text({ message: 'Model name', initialValue: defaults.model, validate: required('a model name') }),
    );
  let baseUrl = options.baseUrl ?? defaults.baseUrl;
  if (options.baseUrl === undefined && defaults.baseUrl !== null)
    baseUrl = answered(
      await text({
        message: "The server's /v1 URL",
        initialValue: defaults.baseUrl,
        validate: required('a URL'),
      }),
    );
  let keyEnv = options.keyEnv ?? defaults.keyEnv;
  if (options.keyEnv === undefined && provider !== 'scripted' && provider !== 'ollama') {
    keyEnv = answered(
      await text({
        message: 'The environment variable that holds the API key',
        initialValue: defaults.keyEnv ?? '',
        validate: (value) =>
          value && KEY_ENV.test(value) ? undefined : 'a variable name, like OPENAI_API_KEY',
      }),
    );
    log.info(
      process.env[keyEnv!] ? `${keyEnv} is set in this shell` : `${keyEnv} is not set in this shell yet`,
    );
  }
  const plugins =
    options.plugin ??
    answered(
      await text({
        message: 'Plugins (comma separated: jsonl-sink, webhook, otel or module paths; empty for none)',
        defaultValue: '',
        placeholder: 'none',
      }),
    )
      .split(',')
      .map((p) => p.trim())
      .filter((p) => p.length > 0);
  return { provider, model, keyEnv, baseUrl, plugins };
}

function required(what: string) {
  return (value: string | undefined) => (value && value.trim().length > 0 ? undefined : `give ${what}`);
}
