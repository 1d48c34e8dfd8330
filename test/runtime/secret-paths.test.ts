import { mkdirSync, realpathSync, symlinkSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { BUILT_IN_SECRET_RULES, SecretPaths } from '../../src/core/runtime/tools/secret-paths.js';
import { tempDir } from '../helpers/tmp.js';

/** A fake home and METIS_HOME in a temp folder: the rules match real paths, so both are real. */
function rig(options: { patterns?: string[]; protectedPaths?: string[] } = {}) {
  const root = realpathSync(tempDir('metis-secrets-'));
  const home = join(root, 'home');
  const metisHome = join(root, 'metis-home');
  mkdirSync(home);
  const secrets = new SecretPaths({ home, env: { METIS_HOME: metisHome }, ...options });
  const why = async (path: string) => (await secrets.match(path))?.why ?? null;
  return { root, home, metisHome, secrets, why };
}

describe('SecretPaths: one test per kind of entry', () => {
  it('metis config files, anywhere', async () => {
    const { why } = rig();
    for (const name of ['metis.config.json', 'metis.config.mjs', '.metisrc', '.metisrc.yaml']) {
      expect(await why(`/srv/project/${name}`)).toBe('a metis config file');
    }
  });

  it('everything under $METIS_HOME (token, databases)', async () => {
    const { metisHome, why } = rig();
    expect(await why(join(metisHome, 'metis.db'))).toMatch(/metis data folder/);
    expect(await why(join(metisHome, 'token'))).toMatch(/metis data folder/);
    expect(await why(`${metisHome}-other/x`)).toBeNull();
  });

  it('.env, .env.* and .envrc, in any case', async () => {
    const { why } = rig();
    for (const name of ['.env', '.env.local', '.env.production', '.ENV', '.envrc']) {
      expect(await why(`/srv/project/${name}`)).toMatch(/environment file/);
    }
    expect(await why('/srv/project/env.txt')).toBeNull();
  });

  it('~/.ssh/** (also when ~/.ssh is a symlink) and SSH key names anywhere', async () => {
    const { root, home, why } = rig();
    expect(await why(join(home, '.ssh', 'config'))).toBe('SSH folder');
    mkdirSync(join(root, 'keys'));
    symlinkSync(join(root, 'keys'), join(home, '.ssh'));
    expect(await why(join(root, 'keys', 'known_hosts'))).toBe('SSH folder');
    for (const name of ['id_rsa', 'id_ed25519', 'id_ecdsa', 'id_dsa', 'id_rsa.old']) {
      expect(await why(`/srv/backup/${name}`)).toBe('an SSH key');
    }
  });

  it('key and certificate files: *.pem, *.key', async () => {
    const { why } = rig();
    expect(await why('/srv/tls/server.pem')).toMatch(/key or certificate/);
    expect(await why('/srv/tls/server.key')).toMatch(/key file/);
    expect(await why('/srv/notes/keyboard.txt')).toBeNull();
  });

  it('cloud and tool credentials in the home folder', async () => {
    const { home, why } = rig();
    expect(await why(join(home, '.aws', 'credentials'))).toBe('AWS credentials');
    expect(await why(join(home, '.aws', 'config'))).toBeNull();
    expect(await why(join(home, '.config', 'gcloud', 'application_default_credentials.json'))).toBe(
      'Google Cloud credentials',
    );
    expect(await why(join(home, '.docker', 'config.json'))).toBe('Docker registry credentials');
    expect(await why(join(home, '.kube', 'config'))).toBe('Kubernetes credentials');
    expect(await why(join(home, '.gnupg', 'private-keys-v1.d', 'x.key'))).not.toBeNull();
  });

  it('password files anywhere: .netrc, .git-credentials, .pgpass', async () => {
    const { home, why } = rig();
    expect(await why(join(home, '.netrc'))).toMatch(/netrc/);
    expect(await why('/srv/project/.git-credentials')).toBe('git credentials');
    expect(await why(join(home, '.pgpass'))).toMatch(/PostgreSQL/);
  });

  it('system password hashes: /etc/shadow, /etc/gshadow and their backups', async () => {
    const { why } = rig();
    expect(await why('/etc/shadow')).toBe('system password hashes');
    expect(await why('/etc/shadow-')).toBe('system password hashes');
    expect(await why('/etc/gshadow')).toBe('system password hashes');
    expect(await why('/etc/passwd')).toBeNull();
  });

  it("this server's own files: the config it loaded (any name) and its database with its siblings", async () => {
    const { why } = rig({ protectedPaths: ['/srv/conf/custom-settings.yaml', '/data/store/x.db'] });
    expect(await why('/srv/conf/custom-settings.yaml')).toMatch(/own files/);
    expect(await why('/data/store/x.db')).toMatch(/own files/);
    expect(await why('/data/store/x.db-wal')).toMatch(/own files/);
    expect(await why('/data/store/x.db.lock')).toMatch(/own files/);
    expect(await why('/data/store/y.db')).toBeNull();
  });

  it('runtime.secret_paths adds globs: a bare pattern matches the end of a path, an absolute one is anchored', async () => {
    const { home, why } = rig({ patterns: ['secrets/*.yml', '/opt/vault/**', '~/notes/private-*'] });
    expect(await why('/srv/project/config/secrets/prod.yml')).toBe('listed in runtime.secret_paths');
    expect(await why('/srv/project/secrets/sub/prod.yml')).toBeNull();
    expect(await why('/opt/vault/a/b/c')).toBe('listed in runtime.secret_paths');
    expect(await why('/srv/opt/vault/a')).toBeNull();
    expect(await why(join(home, 'notes', 'private-diary.md'))).toBe('listed in runtime.secret_paths');
  });

  it('leaves ordinary files alone', async () => {
    const { home, why } = rig();
    for (const path of ['/srv/project/src/index.ts', '/srv/project/README.md', join(home, 'notes.txt')]) {
      expect(await why(path)).toBeNull();
    }
  });

  it('every built-in rule has a reason to show', () => {
    for (const rule of BUILT_IN_SECRET_RULES) expect(rule.why.length).toBeGreaterThan(3);
  });
});
