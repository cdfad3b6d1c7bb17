"""The browser lane: a cross-origin-isolated static server, a Playwright driver for Debian's chromium,
and the pure statistics and rule that judge what the bench page reports."""
