#!/usr/bin/env node
// The `fleet` command (package.json bin): the compiled CLI in dist/cli/fleet.js.
import '../dist/cli/fleet.js';
