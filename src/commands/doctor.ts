import { spinner } from '@clack/prompts';
import { visibleJson, visibleText } from '../client/visible-text.js';
import { loadConfig } from '../core/config/load-config.js';
import type { MetisConfig } from '../core/config/schema.js';
import { isMetisError } from '../core/errors.js';
import { type Check, checkDatabase, checkPort, checkProviders, checkStore } from './doctor-checks.js';
import { checkCluster } from './doctor-cluster.js';
import { checkOtlp } from './doctor-otel.js';
import { ExitError } from './exit-error.js';

export interface DoctorOptions {
  config?: string;
  json?: boolean;
}

const MARK = { ok: '✓', warn: '!', problem: '✗' } as const;

/**
 * `metis doctor`: is this machine ready for `metis serve`? The config, the database, the port, each
 * provider's key and address, the plugins and the otel plugin's OTLP endpoint. Exit 1 when something would stop it; warnings do not.
 */
export async function doctorCommand(options: DoctorOptions): Promise<void> {
  const live = !options.json && process.stdout.isTTY === true ? spinner() : null;
  live?.start('checking the config');
  const checks: Check[] = [];
  let config: MetisConfig | null = null;
  try {
    const loaded = await loadConfig({ explicitPath: options.config ?? null });
    config = loaded.config;
    checks.push({
      name: 'config',
      status: 'ok',
      detail: loaded.filepath ?? 'built-in defaults (no config file found)',
    });
  } catch (error) {
    checks.push({
      name: 'config',
      status: 'problem',
      detail: (error as Error).message,
      ...(isMetisError(error) && error.hint ? { hint: error.hint } : {}),
    });
  }
  if (config !== null) {
    live?.message('checking the database');
    checks.push(checkDatabase(config));
    const store = await checkStore(config);
    if (store !== null) checks.push(store);
    const cluster = await checkCluster(config);
    if (cluster !== null) checks.push(cluster);
    live?.message('checking the port');
    checks.push(await checkPort(config));
    live?.message('checking the providers');
    checks.push(...(await checkProviders(config)));
    live?.message('loading the plugins');
    checks.push(...(await checkPlugins(config, options.config ?? null)));
    const otlp = await checkOtlp(config);
    if (otlp !== null) checks.push(otlp);
  }
  const problems = checks.filter((c) => c.status === 'problem').length;
  live?.stop(problems === 0 ? 'ready for metis serve' : `${problems} problem${problems === 1 ? '' : 's'}`);
  if (options.json) console.log(visibleJson(JSON.stringify({ ok: problems === 0, checks })));
  else {
    for (const check of checks) {
      console.log(`${MARK[check.status]} ${check.name}: ${visibleText(check.detail)}`);
      if (check.hint && check.status !== 'ok') console.log(`    ${visibleText(check.hint)}`);
    }
  }
  if (problems > 0) throw new ExitError(1);
}

async function checkPlugins(config: MetisConfig, configPath: string | null): Promise<Check[]> {
  if (config.plugins.length === 0) return [{ name: 'plugins', status: 'ok', detail: 'none configured' }];
  const { loadConfig: reload } = await import('../core/config/load-config.js');
  const { filepath } = await reload({ explicitPath: configPath });
  const { configured } = await import('./plugins.js');
  try {
    const plugins = await configured(config, filepath);
    return [{ name: 'plugins', status: 'ok', detail: `${plugins.map((p) => p.name).join(', ')} load` }];
  } catch (error) {
    return [
      {
        name: 'plugins',
        status: 'problem',
        detail: (error as Error).message,
        ...(isMetisError(error) && error.hint ? { hint: error.hint } : {}),
      },
    ];
  }
}
