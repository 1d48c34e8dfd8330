import { MetisConfigSchema } from '../core/config/schema.js';
import { MetisError } from '../core/errors.js';

export const PROVIDER_CHOICES = ['scripted', 'anthropic', 'openai', 'ollama', 'openai-compatible'] as const;
export type ProviderChoice = (typeof PROVIDER_CHOICES)[number];

/** What `metis init` asks for; everything else keeps its default. */
export interface InitAnswers {
  readonly provider: ProviderChoice;
  /** The model name at the provider (no `provider:` prefix). */
  readonly model: string;
  /** The variable holding the key; null: no key (scripted, a local server). */
  readonly keyEnv: string | null;
  /** openai-compatible and ollama: the server's `/v1` URL. */
  readonly baseUrl: string | null;
  readonly plugins: readonly string[];
}

export const PROVIDER_DEFAULTS: Record<
  ProviderChoice,
  {
    readonly model: string;
    readonly keyEnv: string | null;
    readonly baseUrl: string | null;
    readonly label: string;
  }
> = {
  scripted: {
    model: 'demo',
    keyEnv: null,
    baseUrl: null,
    label: 'scripted: built in, deterministic, no key',
  },
  anthropic: { model: 'claude-sonnet-4-6', keyEnv: 'ANTHROPIC_API_KEY', baseUrl: null, label: 'Anthropic' },
  openai: { model: 'gpt-4.1-mini', keyEnv: 'OPENAI_API_KEY', baseUrl: null, label: 'OpenAI' },
  ollama: {
    model: 'llama3.2:3b',
    keyEnv: null,
    baseUrl: 'http://localhost:11434/v1',
    label: 'Ollama on this machine (OpenAI-compatible, no key)',
  },
  'openai-compatible': {
    model: 'my-model',
    keyEnv: 'LLM_API_KEY',
    baseUrl: 'http://localhost:8000/v1',
    label: 'another OpenAI-compatible server (vLLM, llama.cpp, a proxy)',
  },
};

/** USD per million tokens, as `runtime.pricing` takes it. */
interface Price {
  readonly input_per_mtok: number;
  readonly output_per_mtok: number;
  readonly cached_input_per_mtok?: number;
  readonly cache_creation_per_mtok?: number;
}

/**
 * The list prices of the models `metis init` proposes (checked 2026-11), written into the config so
 * the costs metis reports are not 0: an unpriced model costs nothing in its figures. A model of the
 * user's own choosing gets a commented entry to fill in instead.
 */
export const PROPOSED_PRICES: Readonly<Record<string, Price>> = {
  'anthropic:claude-sonnet-4-6': {
    input_per_mtok: 3,
    output_per_mtok: 15,
    cached_input_per_mtok: 0.3,
    cache_creation_per_mtok: 3.75,
  },
  'openai:gpt-4.1-mini': { input_per_mtok: 0.4, output_per_mtok: 1.6, cached_input_per_mtok: 0.1 },
};

/** The provider's name in the config: the built-ins keep theirs, a compatible server is `local`. */
export function providerName(provider: ProviderChoice): string {
  return provider === 'openai-compatible' ? 'local' : provider;
}

/** The config object the answers describe, checked against metis's own schema. */
export function configOf(answers: InitAnswers): Record<string, unknown> {
  const name = providerName(answers.provider);
  const entry: Record<string, string> = {};
  if (answers.provider === 'ollama' || answers.provider === 'openai-compatible')
    entry.kind = 'openai-compatible';
  if (answers.baseUrl !== null) entry.base_url = answers.baseUrl;
  if (answers.keyEnv !== null) entry.api_key_env = answers.keyEnv;
  const model = `${name}:${answers.model}`;
  const runtime: Record<string, unknown> = { default_model: model };
  if (answers.provider !== 'scripted') runtime.providers = { [name]: entry };
  const price = PROPOSED_PRICES[model];
  // The scripted models keep their default price beside it: a pricing map replaces the default one.
  if (price !== undefined) runtime.pricing = { [model]: price, ...SCRIPTED_PRICE };
  const config = { runtime, plugins: [...answers.plugins] };
  const checked = MetisConfigSchema.safeParse(config);
  if (!checked.success) {
    const issue = checked.error.issues[0]!;
    throw new MetisError(
      'METIS_ERR_INVALID_ARGUMENT',
      `${issue.path.join('.') || 'config'}: ${issue.message}`,
    );
  }
  return config;
}

const SCRIPTED_PRICE = { 'scripted:*': { input_per_mtok: 1, output_per_mtok: 2 } } as const;

/** A price as a YAML flow mapping on one line. */
function priceLine(price: Price): string {
  return `{ ${Object.entries(price)
    .map(([key, value]) => `${key}: ${value}`)
    .join(', ')} }`;
}

/** The pricing lines: the proposed model's list price, or an entry to fill in for any other model. */
function pricingLines(model: string): string[] {
  const price = PROPOSED_PRICES[model];
  if (price !== undefined)
    return [
      "  # USD per million tokens, for the costs metis reports (your provider's price list may differ).",
      '  pricing:',
      `    ${q(model)}: ${priceLine(price)}`,
      `    ${q('scripted:*')}: ${priceLine(SCRIPTED_PRICE['scripted:*'])}`,
    ];
  return [
    "  # An unpriced model costs 0 in metis's figures: its price, USD per million tokens, counts it.",
    '  # pricing:',
    `  #   ${q(model)}: { input_per_mtok: 0, output_per_mtok: 0 }`,
    `  #   ${q('scripted:*')}: ${priceLine(SCRIPTED_PRICE['scripted:*'])}`,
  ];
}

/** JSON strings are YAML double-quoted scalars: no value can break the file. */
const q = (value: string): string => JSON.stringify(value);

/** The commented `metis.config.yaml` for the answers. */
export function renderConfig(answers: InitAnswers): string {
  configOf(answers);
  const name = providerName(answers.provider);
  const lines = [
    '# metis configuration, written by `metis init`. Every setting and its default:',
    '# docs/configuration.md. `metis config show` prints what is in effect; `metis doctor` checks it.',
    '',
    'server:',
    '  # 127.0.0.1 only; binding another address needs server.bearer_token.',
    '  port: 8421',
    '',
    'runtime:',
    '  # The model of new sessions, as provider:name.',
    `  default_model: ${q(`${name}:${answers.model}`)}`,
  ];
  if (answers.provider !== 'scripted') {
    lines.push(
      '  # docs/providers.md: base_url, api_key_env, max_retries, max_tokens, thinking_budget_tokens.',
    );
    lines.push('  providers:');
    lines.push(`    ${name}:`);
    if (answers.provider === 'ollama' || answers.provider === 'openai-compatible')
      lines.push('      kind: openai-compatible');
    if (answers.baseUrl !== null) lines.push(`      base_url: ${q(answers.baseUrl)}`);
    if (answers.keyEnv !== null) {
      lines.push('      # The key is read from this variable when metis starts; it is never written here.');
      lines.push(`      api_key_env: ${q(answers.keyEnv)}`);
    }
    lines.push(...pricingLines(`${name}:${answers.model}`));
  }
  lines.push(
    '  # Ask before a tool writes files, runs a command or reaches the network (ask | allow | deny).',
    '  tool_confirmation:',
    '    write: ask',
    '    execute: ask',
    '    network: ask',
    '',
    '# Subscribers to every event (docs/plugins.md): jsonl-sink, webhook, otel, or a module path.',
  );
  if (answers.plugins.length === 0) lines.push('plugins: []');
  else {
    lines.push('plugins:');
    for (const plugin of answers.plugins) lines.push(`  - ${q(plugin)}`);
  }
  return `${lines.join('\n')}\n`;
}
