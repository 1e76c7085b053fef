// End-to-end test of the packaged extension in a real VS Code (code-server, VS Code 1.139) driven
// through headless Chromium. scripts/e2e.sh prepares everything (tools, a fresh workspace copy
// with real profiler output, the installed extension, a running code-server) and runs this with:
//   E2E_URL, E2E_WORKSPACE, E2E_SHOTS (screenshot folder), TOOLS_NODE_PATH (playwright-core)
//
// The debugging steps use the real debugpy adapter (python -m debugpy.adapter from the project's
// venv) through a test-only extension (e2e/debugpy-standin) that stands in for Microsoft's
// Python Debugger, which cannot be installed here.
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { join } from 'node:path';

const require = createRequire(import.meta.url);
const { chromium } = require(join(process.env.TOOLS_NODE_PATH, 'playwright-core'));

const URL = process.env.E2E_URL;
const WS = process.env.E2E_WORKSPACE;
const SHOTS = process.env.E2E_SHOTS;

// What F5 runs to stop at the breakpoint: the path through "Run and Debug: Select and Start
// Debugging" to the dynamic entry our DebugConfigurationProvider offers, "Debug Training
// (tensor_dap)" (`python -m tensor_dap run --guard ${file}` under the real debugpy adapter).
const LAUNCH = ['Python Debugger (test stand-in)', 'Debug Training (tensor_dap)'];

const timings = [];
let page;
let stepStart = 0;

/** A timestamp inside a long step, printed with E2E_VERBOSE. */
function mark(what) {
    if (process.env.E2E_VERBOSE) {
        console.log(`\n    ${what} after ${((Date.now() - stepStart) / 1000).toFixed(1)} s`);
    }
}

async function step(name, fn) {
    const start = Date.now();
    stepStart = start;
    process.stdout.write(`e2e: ${name} ... `);
    try {
        await fn();
    } catch (e) {
        console.log('FAILED');
        await page?.screenshot({ path: join(SHOTS, `FAILED-${name.replace(/\W+/g, '-')}.png`) }).catch(() => undefined);
        throw e;
    }
    const ms = Date.now() - start;
    timings.push([name, ms]);
    console.log(`ok (${(ms / 1000).toFixed(1)} s)`);
}

async function shot(name) {
    await page.waitForTimeout(300);  // let the last paint land
    await page.screenshot({ path: join(SHOTS, `${name}.png`) });
}

/** The webview of the active editor or panel: VS Code nests the page two iframes deep. */
function webview() {
    return page.frameLocator('iframe.webview.ready >> visible=true').frameLocator('iframe#active-frame');
}

async function quickInput(prefixKey, text) {
    const input = page.locator('.quick-input-widget input.input');
    for (let attempt = 0; ; attempt++) {
        if (process.env.E2E_VERBOSE && attempt) {
            console.log(`\n    ${prefixKey}: attempt ${attempt + 1}`);
        }
        await page.keyboard.press(prefixKey);
        if (await input.waitFor({ state: 'visible', timeout: 3_000 }).then(() => true, () => false)) {
            break;
        }
        assert.ok(attempt < 3, `${prefixKey} opened no quick input`);
        // Keys typed while a webview has focus can stay in its iframe: focus the workbench.
        await page.locator('.part.titlebar').click({ position: { x: 200, y: 10 } });
    }
    // One input event for the whole text: typing key by key re-filters the list on every key.
    await page.keyboard.insertText(text);
}

async function runCommand(title) {
    const start = Date.now();
    await quickInput('F1', title);
    const typed = Date.now();
    const row = page.locator('.quick-input-list .monaco-list-row', { hasText: title }).first();
    await row.waitFor({ timeout: 10_000 });
    await row.click();
    if (process.env.E2E_VERBOSE) {
        console.log(`\n    ${title}: palette ${typed - start} ms, row ${Date.now() - typed} ms`);
    }
}

async function openFile(name) {
    await quickInput('Control+P', name);
    const row = page.locator('.quick-input-list .monaco-list-row', { hasText: name }).first();
    await row.waitFor({ timeout: 10_000 });
    await page.waitForTimeout(300);  // the list settles on the best match
    await row.click();
    await page.locator('.tab.active', { hasText: name }).waitFor({ timeout: 15_000 });
}

async function closeEditors() {
    await runCommand('View: Close All Editors');
}

/** Drags the sash between the side bar and the editors so one-line summaries fit. */
async function widenSideBar(x) {
    const box = await page.locator('.part.sidebar').boundingBox();
    const y = box.y + box.height / 2;
    await page.mouse.move(box.x + box.width + 1, y);
    await page.mouse.down();
    await page.mouse.move(x, y, { steps: 5 });
    await page.mouse.up();
}

/** ::after texts of the source editor's lines: where VS Code draws decoration text. */
async function decorationTexts() {
    return page.evaluate(() => {
        const out = [];
        for (const el of document.querySelectorAll('.monaco-editor .view-lines span')) {
            const c = getComputedStyle(el, '::after').content;
            if (c && c !== 'none' && c !== 'normal' && c !== '""') {
                out.push(c);
            }
        }
        return out;
    });
}

async function main() {
    const browser = await chromium.launch({
        executablePath: process.env.CHROMIUM ?? '/usr/bin/chromium',
        headless: true,
        args: ['--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run', '--disable-background-networking',
            '--disable-component-update', '--disable-sync', '--disable-dev-shm-usage'],
    });
    const context = await browser.newContext({ viewport: { width: 1400, height: 860 } });
    page = await context.newPage();
    page.setDefaultTimeout(30_000);
    const dialogs = [];
    page.on('dialog', (d) => { dialogs.push(d.message()); void d.dismiss(); });
    try {
        await run(dialogs);
    } finally {
        await browser.close();
    }
    const total = timings.reduce((s, [, ms]) => s + ms, 0);
    console.log(`e2e: all steps passed in ${(total / 1000).toFixed(1)} s`);
}

async function run(dialogs) {
    await step('open VS Code with the workspace', async () => {
        await page.goto(`${URL}/?folder=${encodeURIComponent(WS)}`);
        await page.locator('.monaco-workbench').waitFor({ timeout: 90_000 });
        // Contributions register a moment after the window opens: wait until a command is there.
        const deadline = Date.now() + 60_000;
        for (;;) {
            await quickInput('F1', 'tensor_dap: Create Debug Configuration');
            const found = await page.locator('.quick-input-list .monaco-list-row', { hasText: 'tensor_dap: Create Debug Configuration' })
                .first().waitFor({ timeout: 2_000 }).then(() => true, () => false);
            await page.keyboard.press('Escape');
            if (found) {
                break;
            }
            assert.ok(Date.now() < deadline, 'the extension\'s commands never appeared');
        }
    });

    await step('a .prof opens as a table with callers and an icicle', async () => {
        await openFile('train.prof');
        const view = webview();
        await view.locator('header h1', { hasText: 'train.prof' }).waitFor();
        assert.match(await view.locator('header .muted').textContent(), /[\d,]+ functions · read in \d+ ms/);
        // tensor_dap's estimate of the time spent importing (import torch: most of a short run) arrives from Python
        const note = view.locator('p.imports');
        await note.waitFor({ timeout: 30_000 });
        assert.match(await note.textContent(), /^Imports took [\d.]+ (s|ms) of the [\d.]+ (s|ms) profiled: left out of the table/);
        const count = view.locator('.toolbar .muted');
        const visible = async () => Number((await count.textContent()).match(/^([\d,]+) of/)[1].replace(/,/g, ''));
        await view.locator('input.filter').fill('<module>');
        await count.filter({ hasText: / of / }).waitFor();
        const bodiesLeftOut = await visible();  // the script's own body, and code run from strings: the rest is import
        await note.locator('button', { hasText: 'Show imports' }).click();
        await note.filter({ hasText: 'shown, as the file has them' }).waitFor();
        const bodiesShown = await visible();
        assert.ok(bodiesLeftOut <= 5 && bodiesShown > 50, `module bodies: ${bodiesLeftOut} left out, ${bodiesShown} shown`);
        await note.locator('button', { hasText: 'Leave out imports' }).click();
        await note.filter({ hasText: 'left out of the table' }).waitFor();
        await view.locator('input.filter').fill('train');
        const row = view.locator('.vt-body .vt-row', { hasText: 'train_step' });
        await row.waitFor();
        assert.match(await row.textContent(), /train_steptrain\.py:10\s*20/);
        await row.click();
        await view.locator('.details h3', { hasText: 'Called by (1)' }).waitFor();
        await view.locator('.details a', { hasText: 'main' }).first().waitFor();
        await shot('prof');
        await view.locator('button.tab', { hasText: 'Call tree' }).click();
        await view.locator('.icicle-wrap p', { hasText: 'imports left out' }).waitFor();  // the program's own tree
        await view.locator('canvas.icicle').waitFor({ state: 'visible' });
        const size = await view.locator('canvas.icicle').evaluate((c) => [c.width, c.height]);
        assert.ok(size[0] > 100 && size[1] > 100, `icicle canvas ${size}`);
        await shot('prof-icicle');
    });

    await step('a source link opens the file at the line', async () => {
        const view = webview();
        await view.locator('button.tab', { hasText: 'Functions' }).click();
        await view.locator('.vt-body .vt-row', { hasText: 'train_step' }).locator('a.source').click();
        await page.locator('.tab.active', { hasText: 'train.py' }).waitFor();
        await page.locator('.statusbar', { hasText: /Ln 10, Col 1/ }).waitFor();
        await closeEditors();
    });

    await step('function names holding HTML stay text (hostile.prof)', async () => {
        await openFile('hostile.prof');
        const view = webview();
        await view.locator('input.filter').fill('<script>');  // not 'script': tensor_dap's runner has a _run_script
        const cell = view.locator('.vt-body .vt-row .vt-cell').first();
        await cell.waitFor();
        assert.equal(await cell.textContent(), "<script>alert('x')</script>");
        const location = view.locator('.vt-body .vt-row a.source, .vt-body .vt-row span.muted').first();
        assert.equal(await location.textContent(), '<img src=x onerror=alert(1)>.py:1');
        assert.equal(await view.locator('#app script, #app img').count(), 0, 'no element made from the file\'s text');
        assert.deepEqual(dialogs, []);
        await closeEditors();
    });

    await step('a .lprof opens per-function tables and decorates the source', async () => {
        await openFile('train.lprof');
        const view = webview();
        await view.locator('section.function h2', { hasText: 'train_step' }).waitFor();
        await view.locator('section.function h2', { hasText: 'main' }).waitFor();
        await view.locator('section.function h2', { hasText: /^train_step / }).locator('button', { hasText: 'Show in source' }).click();
        await page.locator('.tab.active', { hasText: 'train.py' }).waitFor();
        let marks = [];
        for (let i = 0; i < 40 && marks.length < 6; i++) {
            await page.waitForTimeout(250);
            marks = (await decorationTexts()).filter((t) => /\d hits?"$/.test(t));
        }
        assert.ok(marks.length >= 6, `line decorations: ${JSON.stringify(marks)}`);
        assert.ok(marks.some((t) => /^"[\d.]+ (ms|µs|s)  [\d.]+%  20 hits"$/.test(t)), JSON.stringify(marks));
        await shot('line-profile');
    });

    await step('the toggle command hides and shows the decorations', async () => {
        await runCommand('tensor_dap: Toggle Line Profile Decorations');
        await page.waitForTimeout(700);
        assert.equal((await decorationTexts()).filter((t) => /hits?"$/.test(t)).length, 0, 'hidden');
        await runCommand('tensor_dap: Toggle Line Profile Decorations');
        await page.waitForTimeout(700);
        assert.ok((await decorationTexts()).filter((t) => /hits?"$/.test(t)).length >= 6, 'shown again');
        await closeEditors();
    });

    await step('a torch.profiler trace shows its top operators', async () => {
        await openFile('train.pt.trace.json');
        const view = webview();
        await view.locator('h2', { hasText: 'Top operators' }).waitFor();
        await view.locator('.vt-body .vt-row', { hasText: 'aten::addmm' }).first().waitFor();
        await view.locator('canvas.timeline').waitFor({ state: 'visible' });
        await shot('trace');
        await closeEditors();
    });

    await step('memory.json lists allocation sites with source links', async () => {
        await openFile('memory.json');
        const view = webview();
        await view.locator('.vt-body .vt-row', { hasText: 'make_model' }).first().waitFor();  // train.py:7 and :6
        assert.match(await view.locator('header .muted').textContent(), /peak RSS [\d.]+ MiB/);
        await closeEditors();
    });

    await step('Profile Current File (line) picks a function, runs tensor-dap profile and opens its .lprof', async () => {
        await openFile('train.py');
        await runCommand('tensor_dap: Profile Current File');
        await page.locator('.quick-input-list .monaco-list-row', { hasText: 'line_profiler' }).first().click();
        // train.py has no @tensor_dap.profile marks: the extension asks which functions (--function).
        const row = page.locator('.quick-input-list .monaco-list-row', { hasText: 'train_step' }).first();
        await row.waitFor();
        const offered = await page.locator('.quick-input-list .monaco-list-row').allTextContents();
        assert.ok(['make_model', 'train_step', 'main'].every((f) => offered.some((r) => r.startsWith(f))), JSON.stringify(offered));
        await row.click();
        await page.locator('.quick-input-widget input.input').click();
        await page.keyboard.press('Enter');
        const view = webview();
        await view.locator('section.function h2', { hasText: /^train_step / }).waitFor({ timeout: 120_000 });
        mark('the run\'s line.lprof is open');
        assert.equal(await view.locator('section.function h2', { hasText: /^main / }).count(), 0, 'only the picked function was profiled');
        await closeEditors();
    });

    await step('the Incidents view lists the bundle and opens its report', async () => {
        await runCommand('Explorer: Focus on tensor_dap Incidents View');
        const item = page.locator('.monaco-list-row', { hasText: 'Inf born in div, in the forward of 1' }).first();
        await item.waitFor();
        await item.click();
        const view = webview();
        await view.locator('h1', { hasText: 'Inf born in div, in the forward of 1' }).waitFor();
        await view.locator('table.facts td', { hasText: 'forward of 1 (Boom)' }).waitFor();
        await view.locator('pre.code', { hasText: 'x / torch.zeros_like(x)' }).waitFor();  // the line that divided
        await view.locator('li', { hasText: 'division by zero' }).waitFor();  // the diagnosis
        await view.locator('button', { hasText: 'Replay in Debugger' }).waitFor();
        await view.locator('table.tensors tr.nonfinite', { hasText: 'Inf!' }).first().waitFor();
        await shot('incident');
        await closeEditors();
    });

    await step('F5 offers tensor_dap\'s configurations', async () => {
        await runCommand('Debug: Select and Start Debugging');
        await page.locator('.quick-input-list .monaco-list-row', { hasText: 'Python Debugger (test stand-in)' }).first().click();
        await page.locator('.quick-input-list .monaco-list-row', { hasText: 'Debug Training (tensor_dap)' }).first().waitFor();
        const rows = await page.locator('.quick-input-list .monaco-list-row').allTextContents();
        assert.ok(rows.some((r) => r.startsWith('Attach to GPU box (SSH tunnel)')), JSON.stringify(rows));
        assert.equal(rows.filter((r) => r.startsWith('Debug Training (tensor_dap)')).length, 1, JSON.stringify(rows));
        await page.keyboard.press('Escape');
    });

    await step('a debugpy session stops at the breakpoint; Variables and the tensor inspector show tensors', async () => {
        const line = readFileSync(join(WS, 'train.py'), 'utf8').split('\n').findIndex((l) => l.includes('# BP')) + 1;
        await openFile('train.py');
        await page.locator('.tab.active', { hasText: 'train.py' }).waitFor();
        await runCommand('Go to Line/Column...');
        await page.keyboard.type(String(line));
        await page.keyboard.press('Enter');
        await runCommand('Debug: Toggle Breakpoint');
        await runCommand('Debug: Select and Start Debugging');
        for (const label of LAUNCH) {
            await page.locator('.quick-input-list .monaco-list-row', { hasText: label }).first().click();
        }
        await page.locator('.pane-header', { hasText: 'Paused on breakpoint' }).waitFor({ timeout: 90_000 });
        mark('paused at the breakpoint');
        await runCommand('View: Hide Panel');  // the terminal and debug console: more room for the screenshots
        await widenSideBar(720);
        // Variables: expand Locals; tensor_dap's debugpy plugin renders each tensor as one line.
        const locals = page.locator('.debug-view-content .monaco-list-row', { hasText: 'Locals' }).first();
        await locals.click();
        await page.locator('.debug-view-content .monaco-list-row', { hasText: /^x\W+tensor\[8, 16\] n=128/ }).first().waitFor();
        mark('Variables show tensor summaries');
        // The tensor inspector view lists the frame's tensors with their summaries.
        const tensorsHeader = page.locator('.pane-header', { hasText: 'Tensors (tensor_dap)' });
        if ((await tensorsHeader.getAttribute('aria-expanded')) !== 'true') {
            await tensorsHeader.click();
        }
        for (const collapse of ['Watch', 'Breakpoints']) {
            const header = page.locator('.pane-header', { hasText: collapse }).first();
            if ((await header.getAttribute('aria-expanded')) === 'true') {
                await header.click();
            }
        }
        const weights = page.locator('[id="workbench.view.debug"] .monaco-list-row', { hasText: /weights\s*Parameter\[32, 16\]/ }).first();
        await weights.waitFor({ timeout: 30_000 });
        await page.locator('[id="workbench.view.debug"] .monaco-list-row', { hasText: /^x\s*tensor\[8, 16\] n=128/ }).first().waitFor();
        mark('the Tensors view lists the frame');
        await shot('variables');
        await weights.click();
        const view = webview();
        await view.locator('h1', { hasText: 'weights' }).waitFor({ timeout: 30_000 });
        await view.locator('code.summary-line', { hasText: 'Parameter[32, 16]' }).waitFor();
        await view.locator('canvas.histogram').waitFor({ state: 'visible' });
        await view.locator('canvas.heatmap').waitFor({ state: 'visible' });
        assert.match(await view.locator('text=/512 finite values/').first().textContent(), /512 finite values/);
        mark('the tensor page is drawn');
        await shot('tensor');
        await runCommand('Debug: Stop');
        await page.locator('[id="workbench.view.debug"] .monaco-list-row', { hasText: /session ended|Pause a Python/ }).first().waitFor();
        await closeEditors();
    });

    await step('Create Debug Configuration merges into launch.json, keeping what was there', async () => {
        await runCommand('tensor_dap: Create Debug Configuration');
        await page.locator('.quick-input-list .monaco-list-row', { hasText: 'Debug Training (args)' }).first().waitFor();
        await page.keyboard.press('Enter');
        await page.locator('.tab.active', { hasText: 'launch.json' }).waitFor();
        let text = '';
        for (let i = 0; i < 20 && !text.includes('Attach to GPU box'); i++) {
            await page.waitForTimeout(250);
            text = readFileSync(join(WS, '.vscode', 'launch.json'), 'utf8');
        }
        for (const expected of ['// The end-to-end test\'s workspace.', '"Python: current file (e2e)"', '"Debug Training (tensor_dap)"',
            '"Debug Training (args)"', '"Attach to GPU box (SSH tunnel)"', '"Debug tests"', '"Profile current file"', '"id": "tensorDapTrainingArgs"']) {
            assert.ok(text.includes(expected), `launch.json has ${expected}:\n${text}`);
        }
    });
}

main().then(
    () => process.exit(0),
    (e) => {
        console.error(e);
        process.exit(1);
    },
);
