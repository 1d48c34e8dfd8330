import { chmodSync, existsSync, readFileSync, statSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { readOrCreateTokenFile, resolveServerAuth } from '../../src/core/http/local-token.js';
import { tempDir } from '../helpers/tmp.js';

describe('the local token file', () => {
  it('is created at first use with 32 random bytes, mode 0600, in a 0700 folder, and stays the same', () => {
    const path = join(tempDir(), 'home', 'token');
    const token = readOrCreateTokenFile(path);
    expect(Buffer.from(token, 'base64url')).toHaveLength(32);
    expect(statSync(path).mode & 0o777).toBe(0o600);
    expect(statSync(join(path, '..')).mode & 0o777).toBe(0o700);
    expect(readFileSync(path, 'utf8')).toBe(`${token}\n`);
    expect(readOrCreateTokenFile(path)).toBe(token);
  });

  it('is refused when group or others can read it, naming the fix and not the token', () => {
    const path = join(tempDir(), 'token');
    writeFileSync(path, 'secret-secret-secret-secret\n');
    chmodSync(path, 0o640);
    expect(() => readOrCreateTokenFile(path)).toThrow(/readable by other users \(mode 640\)/);
    try {
      readOrCreateTokenFile(path);
    } catch (error) {
      expect((error as Error).message).not.toContain('secret-secret');
      expect((error as { hint: string }).hint).toContain(`chmod 600 ${path}`);
    }
  });
});

describe('resolveServerAuth', () => {
  const none = { auth: 'none' as const, bearer_token: null };
  const token = { auth: 'token' as const, bearer_token: null };

  it('takes the config token, then METIS_TOKEN, then METIS_BEARER_TOKEN (deprecated), then the file', () => {
    const tokenFile = join(tempDir(), 'token');
    const config = resolveServerAuth(
      { auth: 'token', bearer_token: 'from-config-0123456789' },
      { loopback: true, tokenFile, env: { METIS_TOKEN: 'from-env-0123456789abc' } },
    );
    expect(config).toMatchObject({ mode: 'token', source: 'config', token: 'from-config-0123456789' });
    const env = resolveServerAuth(token, {
      loopback: true,
      tokenFile,
      env: { METIS_TOKEN: 'from-env-0123456789abc', METIS_BEARER_TOKEN: 'older-0123456789abcdef' },
    });
    expect(env).toMatchObject({ source: 'env', token: 'from-env-0123456789abc', deprecation: null });
    const old = resolveServerAuth(token, {
      loopback: true,
      tokenFile,
      env: { METIS_BEARER_TOKEN: 'older-0123456789abcdef' },
    });
    expect(old).toMatchObject({
      source: 'env',
      deprecation: expect.stringContaining('METIS_BEARER_TOKEN is deprecated'),
    });
    expect(existsSync(tokenFile)).toBe(false);
    const file = resolveServerAuth(token, { loopback: false, tokenFile, env: {} });
    expect(file).toMatchObject({ mode: 'token', source: 'file', tokenFile });
    expect(file.token).toBe(readFileSync(tokenFile, 'utf8').trim());
  });

  it('allows auth: none on loopback only, and a configured token still wins over it', () => {
    const tokenFile = join(tempDir(), 'token');
    expect(resolveServerAuth(none, { loopback: true, tokenFile, env: {} })).toMatchObject({ mode: 'none' });
    expect(() => resolveServerAuth(none, { loopback: false, tokenFile, env: {} })).toThrow(
      /only allowed on a loopback address/,
    );
    expect(
      resolveServerAuth(
        { auth: 'none', bearer_token: 'from-config-0123456789' },
        { loopback: false, tokenFile },
      ),
    ).toMatchObject({ mode: 'token', source: 'config' });
    expect(existsSync(tokenFile)).toBe(false);
  });

  it('refuses a weak token from the environment', () => {
    expect(() =>
      resolveServerAuth(token, {
        loopback: true,
        tokenFile: join(tempDir(), 't'),
        env: { METIS_TOKEN: 'abc' },
      }),
    ).toThrow(/METIS_TOKEN: must be at least 16 characters/);
  });
});

describe('a token file that cannot be used', () => {
  it('is refused when it holds a short hand-written token, naming the rule', () => {
    const path = join(tempDir(), 'token');
    writeFileSync(path, 'abc\n', { mode: 0o600 });
    expect(() => readOrCreateTokenFile(path)).toThrow(/at least 16 characters \(it has 3\)/);
  });

  it('is refused, not waited on for ever, when it stays empty', () => {
    const path = join(tempDir(), 'token');
    writeFileSync(path, '', { mode: 0o600 });
    expect(() => readOrCreateTokenFile(path)).toThrow(/is empty/);
  });
});
