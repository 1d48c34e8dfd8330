import { homedir } from 'node:os';
import path from 'node:path';
import { RE2JS } from 're2js';
import { metisHome } from '../../store/paths.js';
import { realPathLenient } from './workspace-path.js';

/**
 * Files that commonly hold secrets: a file tool asks before reading one, every time, even inside the
 * workspace and even when reads outside it are allowed (docs/configuration.md "Files the agent can read").
 *
 * Patterns are globs matched, case-insensitively, against a file's real path: `*` and `?` stay within
 * one path component, `**` crosses folders. A pattern that starts with `/`, `~/` or `$METIS_HOME/` is
 * anchored there (the anchor's folder is itself resolved with realpath, so a symlinked `~/.ssh` still
 * counts); any other pattern matches the end of a path (`**\/` is implied in front), so `.env` is any
 * file named `.env`. Case is ignored so that `.ENV` on a case-insensitive file system asks too.
 */
export interface SecretRule {
  readonly pattern: string;
  /** Shown in the confirmation: why this file may hold secrets. */
  readonly why: string;
}

export const BUILT_IN_SECRET_RULES: readonly SecretRule[] = [
  { pattern: 'metis.config.*', why: 'a metis config file' },
  { pattern: '.metisrc', why: 'a metis config file' },
  { pattern: '.metisrc.*', why: 'a metis config file' },
  { pattern: '$METIS_HOME/**', why: 'metis data folder: token, databases' },
  { pattern: '.env', why: 'an environment file' },
  { pattern: '.env.*', why: 'an environment file' },
  { pattern: '.envrc', why: 'an environment file (direnv)' },
  { pattern: '~/.ssh/**', why: 'SSH folder' },
  { pattern: 'id_rsa*', why: 'an SSH key' },
  { pattern: 'id_ed25519*', why: 'an SSH key' },
  { pattern: 'id_ecdsa*', why: 'an SSH key' },
  { pattern: 'id_dsa*', why: 'an SSH key' },
  { pattern: '*.pem', why: 'a key or certificate file' },
  { pattern: '*.key', why: 'a key file' },
  { pattern: '~/.aws/credentials', why: 'AWS credentials' },
  { pattern: '~/.config/gcloud/**', why: 'Google Cloud credentials' },
  { pattern: '~/.docker/config.json', why: 'Docker registry credentials' },
  { pattern: '~/.kube/config', why: 'Kubernetes credentials' },
  { pattern: '~/.gnupg/**', why: 'GnuPG folder' },
  { pattern: '.netrc', why: 'a .netrc (passwords)' },
  { pattern: '.git-credentials', why: 'git credentials' },
  { pattern: '.pgpass', why: 'PostgreSQL passwords' },
  { pattern: '/etc/shadow*', why: 'system password hashes' },
  { pattern: '/etc/gshadow*', why: 'system password hashes' },
];

export interface SecretPathsOptions {
  /** Extra globs from `runtime.secret_paths`. */
  readonly patterns?: readonly string[];
  /**
   * Files that hold this server's own secrets wherever they are: the config file it loaded (which may
   * be named anything with `--config`) and its database (with every file named after it).
   */
  readonly protectedPaths?: readonly string[];
  /** Home folder for `~/` (tests); default `os.homedir()`. */
  readonly home?: string;
  /** Environment for `$METIS_HOME` (tests); default `process.env`. */
  readonly env?: NodeJS.ProcessEnv;
}

/** Decides whether a real path may hold secrets. */
export class SecretPaths {
  private readonly rules: readonly SecretRule[];
  private readonly home: string;
  private readonly metisHome: string;

  constructor(options: SecretPathsOptions = {}) {
    this.home = path.resolve(options.home ?? homedir());
    this.metisHome = metisHome(options.env);
    this.rules = [
      ...BUILT_IN_SECRET_RULES,
      ...(options.protectedPaths ?? []).flatMap((p) => [
        // The file itself (a symlink resolves to its target) and its siblings by prefix: a database's
        // -wal, -shm, .lock and .children files.
        { pattern: globEscape(path.resolve(p)), why: 'this metis server’s own files' },
        { pattern: `${globEscape(path.resolve(p))}*`, why: 'this metis server’s own files' },
      ]),
      ...(options.patterns ?? []).map((pattern) => ({ pattern, why: 'listed in runtime.secret_paths' })),
    ];
  }

  /** The first rule `realPath` matches, or null. */
  async match(realPath: string): Promise<SecretRule | null> {
    for (const rule of this.rules) {
      const regex = await this.compile(rule.pattern);
      if (regex.matches(realPath)) return rule;
    }
    return null;
  }

  /** Anchors resolve on every call: `$METIS_HOME` or `~/.ssh` may appear (or be relinked) at any time. */
  private async compile(pattern: string): Promise<RE2JS> {
    const anchored = this.anchor(pattern);
    if (anchored === null) return compileGlob(`**/${pattern}`);
    // The literal folder part before the first wildcard is resolved with realpath: rules match real paths.
    const parts = anchored.split('/');
    const firstWild = parts.findIndex((part) => /(^|[^\\])[*?]/.test(part));
    const literal = (firstWild === -1 ? parts : parts.slice(0, firstWild)).join('/').replace(/\\(.)/g, '$1');
    const real = (await realPathLenient(literal || '/')).real;
    const tail = firstWild === -1 ? [] : parts.slice(firstWild);
    return compileGlob([globEscape(real), ...tail].join('/').replace(/^\/\//, '/'));
  }

  private anchor(pattern: string): string | null {
    if (pattern.startsWith('~/')) return `${this.home}/${pattern.slice(2)}`;
    if (pattern.startsWith('$METIS_HOME/'))
      return `${this.metisHome}/${pattern.slice('$METIS_HOME/'.length)}`;
    if (pattern.startsWith('/')) return pattern;
    return null;
  }
}

const compiled = new Map<string, RE2JS>();

/** A glob as an RE2 pattern (linear time whatever the pattern), cached by its source. */
function compileGlob(glob: string): RE2JS {
  let regex = compiled.get(glob);
  if (regex === undefined) {
    regex = RE2JS.compile(globToRegex(glob), RE2JS.CASE_INSENSITIVE);
    compiled.set(glob, regex);
  }
  return regex;
}

function globToRegex(glob: string): string {
  let out = '';
  for (let i = 0; i < glob.length; i++) {
    const char = glob[i]!;
    if (char === '\\' && i + 1 < glob.length) {
      out += RE2JS.quote(glob[++i]!);
    } else if (glob.startsWith('**/', i)) {
      out += '(?:.*/)?';
      i += 2;
    } else if (glob.startsWith('/**', i) && i + 3 === glob.length) {
      out += '(?:/.*)?';
      i += 2;
    } else if (glob.startsWith('**', i)) {
      out += '.*';
      i += 1;
    } else if (char === '*') {
      out += '[^/]*';
    } else if (char === '?') {
      out += '[^/]';
    } else {
      out += RE2JS.quote(char);
    }
  }
  return out;
}

/** A literal path as a glob: its wildcard characters (and backslashes) escaped. */
function globEscape(literal: string): string {
  return literal.replace(/[\\*?]/g, (c) => `\\${c}`);
}
