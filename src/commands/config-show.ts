import { loadConfig } from '../core/config/load-config.js';

export interface ConfigShowOptions {
  json?: boolean;
  config?: string;
}

/** Keys whose values are secrets: `bearer_token`, `api_key`, a webhook's `secret`, auth headers. */
const SECRET_KEY = /(^|[_-])(secret|password|token|api[_-]?key|authorization)$/i;
export const REDACTED = '[redacted]';

/** A deep copy with every secret value replaced by `[redacted]` (null stays null: "not set"). */
export function redactSecrets(value: unknown, key = ''): unknown {
  if (SECRET_KEY.test(key) && value !== null && value !== undefined && typeof value !== 'object') {
    return REDACTED;
  }
  if (Array.isArray(value)) return value.map((item) => redactSecrets(item));
  if (value !== null && typeof value === 'object') {
    return Object.fromEntries(Object.entries(value).map(([k, v]) => [k, redactSecrets(v, k)]));
  }
  return value;
}

/** `server.port = 8421` lines; arrays and empty objects are printed as JSON on one line. */
function flatten(value: unknown, prefix: string, out: string[]): void {
  if (value !== null && typeof value === 'object' && !Array.isArray(value) && Object.keys(value).length > 0) {
    for (const [key, child] of Object.entries(value)) flatten(child, prefix ? `${prefix}.${key}` : key, out);
    return;
  }
  if (Array.isArray(value) && value.length > 0) {
    value.forEach((item, i) => {
      out.push(`${prefix}[${i}] = ${JSON.stringify(item)}`);
    });
    return;
  }
  out.push(`${prefix} = ${JSON.stringify(value)}`);
}

/** `metis config show`: the resolved config (defaults applied, secrets redacted) and its file. */
export async function configShowCommand(options: ConfigShowOptions): Promise<void> {
  const { config, filepath } = await loadConfig({ explicitPath: options.config ?? null });
  const shown = redactSecrets(config);
  if (options.json) {
    console.log(JSON.stringify({ file: filepath, config: shown }, null, 2));
    return;
  }
  const lines: string[] = [];
  flatten(shown, '', lines);
  console.log(`# from ${filepath ?? 'no config file (built-in defaults)'}`);
  console.log(lines.join('\n'));
}
