import { createHash } from 'node:crypto';
import { readFileSync, unwatchFile, watchFile } from 'node:fs';
import { extname, resolve } from 'node:path';
import { defaultLoadersSync } from 'cosmiconfig';
import type { Logger } from 'pino';
import { z } from 'zod';
import type { EventBus } from '../bus/event-bus.js';
import { type RoutingRule, RoutingRuleSchema, type RuntimeConfig } from '../config/runtime-schema.js';
import { SYSTEM_SESSION_ID } from '../events/envelope.js';

/** A policy file: the rules, as `routing_rules` in the config, under `rules` (or the list alone). */
const PolicyFileSchema = z.strictObject({ rules: z.array(RoutingRuleSchema) });

/**
 * The routing rules in effect and their version (the snapshot's `routing_policy_version`). With
 * `runtime.routing_policy_file` they come from that file, re-read when it changes (bus §6.4): a file
 * that does not load emits `routing.policy_invalid` with every error and the last good rules stay in
 * effect. Without a good file yet, the config's own `routing_rules` apply.
 */
export class RoutingPolicy {
  private current: readonly RoutingRule[];
  private currentVersion: string;
  private readonly path: string | null;
  private lastGood = false;

  constructor(
    private readonly config: RuntimeConfig,
    private readonly bus: EventBus,
    private readonly options: {
      /** Why a rule's model cannot serve (an unknown provider, one out of routing), or null. */
      readonly modelProblem?: (model: string) => string | null;
      readonly logger?: Logger;
    } = {},
  ) {
    this.current = config.routing_rules;
    this.currentVersion = this.versionOf(this.current);
    this.path = config.routing_policy_file === null ? null : resolve(config.routing_policy_file);
    if (this.path === null) return;
    this.reload();
    watchFile(this.path, { interval: config.routing_policy_poll_ms, persistent: false }, () => this.reload());
  }

  get rules(): readonly RoutingRule[] {
    return this.current;
  }

  get version(): string {
    return this.currentVersion;
  }

  close(): void {
    if (this.path !== null) unwatchFile(this.path);
  }

  /** Reads the file again; returns whether its rules are now in effect. */
  reload(): boolean {
    const path = this.path!;
    const errors = this.problemsOf(path);
    if (typeof errors !== 'string' && !Array.isArray(errors)) {
      this.current = errors.rules;
      this.currentVersion = this.versionOf(errors.rules);
      this.lastGood = true;
      return true;
    }
    const list = Array.isArray(errors) ? errors : [errors];
    this.options.logger?.warn(
      { policy_path: path, errors: list, using_last_known_good: this.lastGood },
      `routing policy file not loaded: ${list.join('; ')}; ${this.lastGood ? 'the last good version stays in effect' : 'the config rules stay in effect'}`,
    );
    this.bus.emit({
      type: 'routing.policy_invalid',
      session_id: SYSTEM_SESSION_ID,
      actor: 'system',
      payload: {
        policy_path: path,
        errors: list,
        using_last_known_good: this.lastGood,
      },
    });
    return false;
  }

  /** The file's rules, or why they cannot be used (one line per problem). */
  private problemsOf(path: string): { rules: RoutingRule[] } | string | string[] {
    let content: string;
    try {
      content = readFileSync(path, 'utf8');
    } catch (error) {
      return `cannot read ${path}: ${(error as Error).message}`;
    }
    let parsed: unknown;
    try {
      const extension = extname(path).toLowerCase();
      const loader = extension === '.json' ? defaultLoadersSync['.json'] : defaultLoadersSync['.yaml'];
      parsed = loader(path, content);
    } catch (error) {
      return `${path} is not valid ${extname(path) === '.json' ? 'JSON' : 'YAML'}: ${(error as Error).message}`;
    }
    // A bare list is the rules: checked as `rules` so every error names its place the same way.
    const checked = PolicyFileSchema.safeParse(Array.isArray(parsed) ? { rules: parsed } : parsed);
    if (!checked.success)
      return checked.error.issues.map((issue) => `${issue.path.join('.') || '(file)'}: ${issue.message}`);
    const unusable = checked.data.rules.flatMap((rule, index) => {
      const problem = this.options.modelProblem?.(rule.model) ?? null;
      return problem === null ? [] : [`rules.${index}.model: "${rule.model}" ${problem}`];
    });
    return unusable.length > 0 ? unusable : checked.data;
  }

  private versionOf(rules: readonly RoutingRule[]): string {
    const { default_model, workspace_models, worker_tiers } = this.config;
    return createHash('sha256')
      .update(JSON.stringify([default_model, workspace_models, rules, worker_tiers]))
      .digest('hex');
  }
}
