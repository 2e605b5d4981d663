// SPDX-License-Identifier: Apache-2.0
// The manifests tests' npm packages: `npm ci` of package-lock.json into the build
// directory, once per lock file, and once however many tests ask at the same time.
//
// import { installPackages } from "./npm-packages.mjs";
//   installPackages(packagesDir, workDir) -> the directory holding node_modules
// It exits the process with 77 (skipped) when npm is missing, 1 when npm ci fails.

import { spawnSync } from "node:child_process";
import { createHash } from "node:crypto";
import fs from "node:fs";
import path from "node:path";
import { fileURLToPath } from "node:url";

const SKIP = 77;
const LOCK_TIMEOUT = 75; // flock's exit status when the lock stays taken
const thisFile = fileURLToPath(import.meta.url);

function stampPath(npmDir) {
	return path.join(npmDir, "node_modules", ".ip-masq-agent-lock-sha256");
}

function lockHash(packagesDir) {
	const lock = fs.readFileSync(path.join(packagesDir, "package-lock.json"));
	return createHash("sha256").update(lock).digest("hex");
}

function installed(npmDir, hash) {
	const stamp = stampPath(npmDir);
	return fs.existsSync(stamp) && fs.readFileSync(stamp, "utf8") === hash;
}

// The install itself; runs under the lock (see installPackages).
function install(packagesDir, npmDir) {
	const hash = lockHash(packagesDir);
	if (installed(npmDir, hash))
		return 0; // another test installed them while this one waited for the lock
	for (const name of ["package.json", "package-lock.json"])
		fs.copyFileSync(path.join(packagesDir, name), path.join(npmDir, name));
	const started = Date.now();
	// --prefer-offline: npm's cache answers without asking the registry again.
	const npm = spawnSync("npm", ["ci", "--no-audit", "--no-fund", "--ignore-scripts", "--prefer-offline"],
			      { cwd: npmDir, encoding: "utf8" });
	if (npm.error && npm.error.code === "ENOENT") {
		console.log("npm not found (Debian: apt-get install npm): skipped");
		return SKIP;
	}
	if (npm.status !== 0) {
		console.error(`npm ci in ${npmDir} failed (exit ${npm.status}):\n${npm.stdout}${npm.stderr}`);
		return 1;
	}
	fs.writeFileSync(stampPath(npmDir), hash);
	console.log(`# npm ci: installed the pinned packages in ${((Date.now() - started) / 1000).toFixed(1)} s`);
	return 0;
}

export function installPackages(packagesDir, workDir) {
	const npmDir = path.join(workDir, "npm");
	fs.mkdirSync(npmDir, { recursive: true });
	if (installed(npmDir, lockHash(packagesDir)))
		return npmDir;
	// meson runs the manifests tests in parallel, and two `npm ci` in one directory
	// would remove each other's files. flock(1) (util-linux, on every Debian system)
	// serializes them; the kernel drops the lock when its holder dies, so a killed
	// test leaves no stale lock behind.
	const run = spawnSync("flock", ["--timeout", "240", "--conflict-exit-code", String(LOCK_TIMEOUT), path.join(workDir, "npm.lock"),
					process.execPath, thisFile, packagesDir, npmDir],
			      { stdio: "inherit" });
	if (run.error) {
		console.error(`flock: ${run.error.message} (Debian: util-linux)`);
		process.exit(1);
	}
	if (run.status === LOCK_TIMEOUT)
		console.error(`another test held ${path.join(workDir, "npm.lock")} for 240 s: its npm ci hangs?`);
	if (run.status !== 0)
		process.exit(run.status === SKIP ? SKIP : 1);
	return npmDir;
}

// Run by installPackages under the lock: node npm-packages.mjs PACKAGES_DIR NPM_DIR
if (process.argv[1] === thisFile)
	process.exit(install(process.argv[2], process.argv[3]));
