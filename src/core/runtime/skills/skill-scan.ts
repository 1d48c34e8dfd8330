/**
 * The security scan of a skill `metis skills create|edit` writes (bus spec §6.6 `security_scan_result`).
 * A skill's body enters the model's context as instructions, so a skill copied from elsewhere can tell
 * the agent to send the user's data away or to run what it downloads. The scan reads the text line by
 * line against the table below; it is a tripwire for the obvious, not a sandbox (the tool policy and
 * confirmations still apply to whatever the model then does).
 */

/** `block`: the write is refused unless forced. `warning`: written, and the reason is printed. */
export type ScanSeverity = 'block' | 'warning';

/** The catalog's enum for `skill.created.security_scan_result`. */
export type ScanResult = 'clean' | 'warning' | 'blocked';

export interface ScanRule {
  readonly id: string;
  readonly severity: ScanSeverity;
  readonly pattern: RegExp;
  readonly reason: string;
}

/** A host outside the machine: any URL whose host is not loopback. */
const REMOTE = String.raw`https?://(?!(?:localhost|127\.0\.0\.1|\[::1\])[:/\s])[\w.-]+`;
/** Where local secrets live. */
const SECRETS = String.raw`(?:~|\$HOME|/home/[\w.-]+|/root)/\.(?:ssh|aws|gnupg|kube|docker|netrc|npmrc|pgpass)|\bid_(?:rsa|ed25519|ecdsa)\b|/etc/(?:passwd|shadow)|(?:^|[\s'"\x60(=])\.env\b`;

export const SCAN_RULES: readonly ScanRule[] = [
  {
    id: 'pipe-to-shell',
    severity: 'block',
    pattern:
      /\b(?:curl|wget|fetch|iwr|Invoke-WebRequest)\b[^|\n]*\|\s*(?:sudo\s+)?(?:ba|z|da|k)?sh\b|\b(?:ba|z)?sh\s+<\(\s*(?:curl|wget)\b/i,
    reason: 'runs a script downloaded from the network (`curl … | sh`)',
  },
  {
    id: 'upload-local-data',
    severity: 'block',
    pattern: new RegExp(
      String.raw`\b(?:curl|wget|http|nc|ncat|scp|rsync)\b[^\n]*(?:\s-d\s*@|--data(?:-binary|-raw)?[ =]@|\s-F\s*\S*=@|--upload-file|--post-file|\s-T\s)[^\n]*|\b(?:curl|wget)\b[^\n]*${REMOTE}[^\n]*\$\(|\b(?:scp|rsync)\b[^\n]*\s[\w.-]+@?[\w.-]+:`,
      'i',
    ),
    reason: 'sends local files or command output to another host',
  },
  {
    id: 'secrets',
    severity: 'block',
    pattern: new RegExp(SECRETS, 'i'),
    reason: 'reads credentials (~/.ssh, ~/.aws, .env, id_rsa, /etc/shadow …)',
  },
  {
    id: 'env-to-url',
    severity: 'block',
    pattern: new RegExp(
      String.raw`\b(?:env|printenv|set)\b\s*\|[^\n]*(?:curl|wget|nc)\b|${REMOTE}[^\s]*\$\{?[A-Z_]*(?:KEY|TOKEN|SECRET|PASSWORD)`,
      'i',
    ),
    reason: 'sends environment variables or secrets to a URL',
  },
  {
    id: 'exfiltrate-instruction',
    severity: 'block',
    pattern:
      /\b(?:send|upload|post|exfiltrate|forward|transmit|copy)\b[^\n]{0,80}\b(?:files?|env(?:ironment)?|secrets?|credentials?|keys?|tokens?|passwords?|history|contents)\b[^\n]{0,80}\b(?:to|at)\b[^\n]{0,40}(?:https?:\/\/|\bwebhook\b|\bpastebin\b|@[\w-]+\.[a-z]{2,})/i,
    reason: 'tells the agent to send data to an outside address',
  },
  {
    id: 'base64-secrets',
    severity: 'block',
    pattern: /\bbase64\b[^\n]*(?:~|\$HOME)\/\.|(?:~|\$HOME)\/\.[^\n]*\|\s*base64\b/i,
    reason: 'encodes files of the home folder with base64 (a way to smuggle them out)',
  },
  {
    id: 'destructive',
    severity: 'block',
    pattern:
      /\brm\s+(?:-[a-z]*r[a-z]*f|-[a-z]*f[a-z]*r|--recursive\s+--force|--force\s+--recursive)[a-z]*\b|\bmkfs(?:\.\w+)?\b|\bdd\s+[^\n]*of=\/dev\/|:\(\)\s*\{\s*:\s*\|\s*:\s*&\s*\}/i,
    reason: 'deletes or overwrites data (`rm -rf`, mkfs, dd to a device, fork bomb)',
  },
  {
    id: 'prompt-injection',
    severity: 'block',
    pattern:
      /\b(?:ignore|disregard|forget|override)\b[^\n]{0,30}\b(?:all\s+)?(?:previous|prior|above|earlier|system|your)\b[^\n]{0,20}\b(?:instructions?|prompts?|rules?|guidelines?)\b|\bdo not (?:tell|inform|show) the user\b|\bwithout (?:asking|telling) the user\b/i,
    reason: 'tries to override the instructions the agent was given, or to hide actions from the user',
  },
  {
    id: 'hidden-unicode',
    severity: 'block',
    pattern: /[\u200B-\u200F\u202A-\u202E\u2060-\u2064\u2066-\u2069\uFEFF\u{E0000}-\u{E007F}]/u,
    reason:
      'contains invisible characters (zero-width, bidirectional overrides or tag characters) that can hide text',
  },
  {
    id: 'privilege',
    severity: 'warning',
    pattern: /\bsudo\b|\bchmod\s+(?:-R\s+)?[0-7]?777\b|\bchown\s+-R\b/i,
    reason: 'asks for elevated privileges or world-writable permissions',
  },
  {
    id: 'eval',
    severity: 'warning',
    pattern: /\beval\s*[("$`]|\bexec\s*\(|\bpython[0-9.]*\s+-c\b|\bnode\s+-e\b|\bbash\s+-c\b/i,
    reason: 'runs code built from a string',
  },
  {
    id: 'shell-pipeline',
    severity: 'warning',
    // Inline code or a `$ ` prompt line; lines of a fenced block are tested as inline code (scanSkill).
    pattern: /`[^`\n]*\S\s*\|\s*\w[^`\n]*`|^\s*\$\s+[^\n]*\S\s*\|\s*\w/,
    reason: 'tells the agent to run a shell pipeline',
  },
  {
    id: 'remote-download',
    severity: 'warning',
    pattern: new RegExp(String.raw`\b(?:curl|wget)\b[^\n]*${REMOTE}`, 'i'),
    reason: 'downloads from a host outside the machine',
  },
];

export interface ScanFinding {
  /** 1-based line of the SKILL.md text. */
  readonly line: number;
  readonly rule: string;
  readonly severity: ScanSeverity;
  readonly reason: string;
  /** The line, trimmed to 80 characters, invisible characters shown as \u escapes. */
  readonly excerpt: string;
}

export interface ScanReport {
  readonly result: ScanResult;
  readonly findings: readonly ScanFinding[];
}

function visible(line: string): string {
  const shown = line
    .trim()
    .replace(
      /[\u200B-\u200F\u202A-\u202E\u2060-\u2064\u2066-\u2069\uFEFF\u{E0000}-\u{E007F}]/gu,
      (c) => `\\u{${c.codePointAt(0)!.toString(16).toUpperCase()}}`,
    );
  return shown.length > 80 ? `${shown.slice(0, 77)}...` : shown;
}

/** Scans a whole SKILL.md (front matter included: the description is shown to the model too). */
export function scanSkill(text: string): ScanReport {
  const findings: ScanFinding[] = [];
  let fenced = false;
  text.split(/\r?\n/).forEach((line, index) => {
    const fence = /^\s*(?:```|~~~)/.test(line);
    // Inside a fenced block every line is a command the agent may run: scanned as inline code.
    const seen = fenced && !fence ? `\`${line}\`` : line;
    if (fence) fenced = !fenced;
    const matched = SCAN_RULES.filter((rule) => rule.pattern.test(seen));
    // A line that is blocked says so once: its warnings (a pipeline, a download) add nothing.
    const shown = matched.some((rule) => rule.severity === 'block')
      ? matched.filter((rule) => rule.severity === 'block')
      : matched;
    for (const rule of shown) {
      findings.push({
        line: index + 1,
        rule: rule.id,
        severity: rule.severity,
        reason: rule.reason,
        excerpt: visible(line),
      });
    }
  });
  const result = findings.some((f) => f.severity === 'block')
    ? 'blocked'
    : findings.length > 0
      ? 'warning'
      : 'clean';
  return { result, findings };
}

/** A finding as one line, the form the CLI prints and `security_scan_findings` records. */
export function describeFinding(finding: ScanFinding): string {
  return `line ${finding.line}: ${finding.reason} [${finding.rule}, ${finding.severity}]: ${finding.excerpt}`;
}
