#!/usr/bin/env node
// The `fleet` command (package.json bin): the compiled CLI in dist/lib/cli/fleet.js.
import '../dist/lib/cli/fleet.js';
