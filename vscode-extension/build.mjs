// Builds the extension with esbuild: the extension host bundle (dist/extension.js), one script
// per webview (dist/ui/*.js, plus the stylesheet), and the launch.json templates copied from the
// Python package, their single source. `--tests` also bundles test/ and bench/ into out/ for
// `node --test`. Type checking is `npm run typecheck` (tsc), separate so a build stays fast.
import * as esbuild from 'esbuild';
import { copyFileSync, mkdirSync, readdirSync, rmSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

const root = dirname(fileURLToPath(import.meta.url));
const tests = process.argv.includes('--tests');
const production = process.argv.includes('--production');

rmSync(join(root, 'dist'), { recursive: true, force: true });
mkdirSync(join(root, 'dist', 'ui'), { recursive: true });
copyFileSync(join(root, '..', 'tensor_dap', 'dap', 'launch_templates.json'), join(root, 'dist', 'launch_templates.json'));
copyFileSync(join(root, 'ui', 'style.css'), join(root, 'dist', 'ui', 'style.css'));

// jsonc-parser's UMD main uses a require() esbuild cannot follow: prefer ES module builds.
const common = { mainFields: ['module', 'main'], bundle: true, sourcemap: !production, minify: production, logLevel: 'warning', target: 'es2022' };

const builds = [
    esbuild.build({
        ...common,
        entryPoints: [join(root, 'src', 'extension.ts')],
        outfile: join(root, 'dist', 'extension.js'),
        platform: 'node',
        format: 'cjs',
        external: ['vscode'],
    }),
    esbuild.build({
        ...common,
        entryPoints: readdirSync(join(root, 'ui')).filter((f) => f.endsWith('.ts') && !f.startsWith('_')).map((f) => join(root, 'ui', f)),
        outdir: join(root, 'dist', 'ui'),
        platform: 'browser',
        format: 'iife',
    }),
];
if (tests) {
    for (const dir of ['test', 'bench']) {
        rmSync(join(root, 'out', dir), { recursive: true, force: true });
        const entries = readdirSync(join(root, dir)).filter((f) => f.endsWith('.ts') && !f.startsWith('_')).map((f) => join(root, dir, f));
        builds.push(esbuild.build({
            ...common,
            sourcemap: true,
            entryPoints: entries,
            outdir: join(root, 'out', dir),
            platform: 'node',
            format: 'cjs',
            external: ['vscode'],
        }));
    }
}
await Promise.all(builds);
