// Where the unit tests' generated fixtures are: scripts/fixtures.sh writes them with the
// project's Python (real cProfile, line_profiler, torch.profiler and tensor_dap runs).
import { existsSync, readFileSync } from 'node:fs';
import { join } from 'node:path';

export const FIXTURES = process.env.TENSOR_DAP_FIXTURES ?? join(__dirname, '..', 'fixtures');

export function fixture(name: string): string {
    const path = join(FIXTURES, name);
    if (!existsSync(path)) {
        throw new Error(`missing fixture ${path}: run scripts/fixtures.sh (or npm test) first`);
    }
    return path;
}

export function bytes(name: string): Uint8Array {
    return new Uint8Array(readFileSync(fixture(name)));
}

export function text(name: string): string {
    return readFileSync(fixture(name), 'utf8');
}

export function json<T = unknown>(name: string): T {
    return JSON.parse(text(name)) as T;
}
