/**
 * The one HTML page every webview starts from: a strict Content-Security-Policy (nothing
 * remote, scripts only with this page's nonce, styles only from the extension), the shared
 * stylesheet and one bundled script. No data goes into the HTML: the script receives it as a
 * message and builds the page with textContent, so text from a file is never parsed as markup.
 */
import { randomBytes } from 'crypto';

export interface PageParts {
    title: string;
    cspSource: string;   // webview.cspSource
    scriptUri: string;   // webview.asWebviewUri(dist/ui/<name>.js)
    styleUri: string;    // webview.asWebviewUri(dist/ui/style.css)
    nonce?: string;
}

export function nonce(): string {
    return randomBytes(18).toString('base64').replace(/[+/=]/g, '');
}

export function escapeHtml(text: string): string {
    return text.replace(/[&<>"']/g, (c) => ({ '&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;', "'": '&#39;' })[c]!);
}

export function contentSecurityPolicy(cspSource: string, scriptNonce: string): string {
    return [
        "default-src 'none'",
        `img-src ${cspSource} data:`,
        `style-src ${cspSource}`,
        `font-src ${cspSource}`,
        `script-src 'nonce-${scriptNonce}'`,
    ].join('; ');
}

export function pageHtml(parts: PageParts): string {
    const n = parts.nonce ?? nonce();
    const attr = (s: string) => escapeHtml(s);
    return `<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="UTF-8">
<meta http-equiv="Content-Security-Policy" content="${attr(contentSecurityPolicy(parts.cspSource, n))}">
<meta name="viewport" content="width=device-width, initial-scale=1.0">
<link rel="stylesheet" href="${attr(parts.styleUri)}">
<title>${escapeHtml(parts.title)}</title>
</head>
<body>
<main id="app"><p class="muted">Loading…</p></main>
<script nonce="${attr(n)}" src="${attr(parts.scriptUri)}"></script>
</body>
</html>`;
}
