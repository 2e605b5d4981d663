// SPDX-License-Identifier: Apache-2.0
// What users get from manifests/ with a real kubectl, the commands of docs/kubernetes.md:
// `kubectl kustomize` of the kustomization (the DaemonSet, its labels, image, probes
// and nodes), of an overlay that sets the image, of one with the opt-in component
// components/masq-agent-ds-ready, of one with each discovery component
// (components/discovery-*: the ConfigMap, --config-dir and the mounts), and `kubectl
// create configmap --from-file` of the example config.
//
// node kustomize.mjs --manifests DIR --packages DIR --work DIR [--version X]
//   --packages, --work: as for validate.mjs (the npm packages, for the YAML parser)
//   KUBECTL=PATH in the environment: the kubectl to run (default: kubectl on PATH),
//   for example Debian 12's own (kubernetes-client, 1.20) unpacked somewhere
// Exit status: 0 all passed, 1 a check failed, 77 skipped (no kubectl, no npm).

import { spawnSync } from "node:child_process";
import fs from "node:fs";
import { createRequire } from "node:module";
import path from "node:path";
import { kubectlVersion, kustomizeBuild, offlineEnv } from "./kubectl.mjs";
import { installPackages } from "./npm-packages.mjs";

const SKIP = 77;

function parseArgs(argv) {
	const args = {};
	for (let i = 0; i < argv.length; i += 2) {
		if (!argv[i].startsWith("--") || argv[i + 1] === undefined) {
			console.error("usage: node kustomize.mjs --manifests DIR --packages DIR --work DIR [--version X]");
			process.exit(2);
		}
		args[argv[i].slice(2)] = argv[i + 1];
	}
	for (const required of ["manifests", "packages", "work"])
		if (!args[required]) {
			console.error(`kustomize.mjs: --${required} is required`);
			process.exit(2);
		}
	return args;
}

const args = parseArgs(process.argv.slice(2));
const manifestsDir = path.resolve(args.manifests);
fs.mkdirSync(args.work, { recursive: true });

const kubectl = process.env.KUBECTL || "kubectl";
const env = offlineEnv(args.work);
const version = kubectlVersion(kubectl, env);
if (version.missing) {
	console.log(`${kubectl} not found (https://kubernetes.io/docs/tasks/tools/, or Debian's kubernetes-client): skipped`);
	process.exit(SKIP);
}
if (version.error) {
	console.log(`not ok - ${kubectl} answers its version\n    ${version.error}`);
	process.exit(1);
}
console.log(`# ${kubectl}: ${version.gitVersion}, kustomize ${version.kustomize}`);

const npmDir = installPackages(args.packages, args.work);
const YAML = createRequire(path.join(npmDir, "package.json"))("yaml");

// ---------------------------------------------------------------- reporting

let passed = 0;
let failed = 0;

function check(name, problems) {
	if (problems.length === 0) {
		passed++;
		console.log(`ok - ${name}`);
		return;
	}
	failed++;
	console.log(`not ok - ${name}`);
	for (const problem of problems)
		console.log(`    ${problem}`);
}

// JSON with every object's keys sorted, so that equal objects print the same.
const canonical = (value) => Array.isArray(value) ? value.map(canonical)
	: value !== null && typeof value === "object"
		? Object.fromEntries(Object.keys(value).sort().map((k) => [k, canonical(value[k])]))
		: value;
const json = (value) => JSON.stringify(canonical(value));
const same = (a, b) => json(a) === json(b);
const expect = (problems, what, got, want) => {
	if (!same(got, want))
		problems.push(`${what} is ${json(got)}, expected ${json(want)}`);
};

// ---------------------------------------------------------------- what is expected

const AGENT = "ip-masq-agent";
const IMAGE = "registry.k8s.io/networking/ip-masq-agent-nft";
const HEALTH_PORT = 10263;
const LABELS = { "app.kubernetes.io/component": "node-agent", "app.kubernetes.io/name": AGENT, "k8s-app": AGENT };
// Upstream's, unchanged: a DaemonSet's selector is immutable.
const SELECTOR = { matchLabels: { "k8s-app": AGENT } };

// The one DaemonSet of a render, or the problems.
function daemonSetOf(built, problems) {
	if (built.error) {
		problems.push(built.error);
		return null;
	}
	const kinds = built.objects.map((o) => `${o?.kind} ${o?.metadata?.name}`);
	const daemonSets = built.objects.filter((o) => o?.kind === "DaemonSet");
	if (daemonSets.length !== 1 || built.objects.length !== 1)
		problems.push(`rendered ${json(kinds)}, expected the DaemonSet alone (the ConfigMap is applied apart)`);
	return daemonSets[0] ?? null;
}

const containerOf = (ds) => ds?.spec?.template?.spec?.containers?.find((c) => c.name === AGENT);

// A probe's port, resolved through the container's named ports as the kubelet does.
function probePort(container, probe) {
	const port = probe?.httpGet?.port;
	if (typeof port === "number")
		return port;
	return (container?.ports ?? []).find((p) => p.name === port)?.containerPort;
}

// Renders a temporary overlay with manifests/ as its base. fields(base) gives the rest
// of its kustomization; base is the relative path from the overlay to manifests/
// (kustomize refuses absolute ones).
function renderOverlay(name, fields) {
	const dir = fs.mkdtempSync(path.join(args.work, `${name}-`));
	const base = path.relative(dir, manifestsDir);
	// kubectl up to 1.20 (kustomize v2.0.3) takes a directory only under `bases`;
	// later ones under `resources`, and warn that `bases` is deprecated.
	const baseField = version.minor <= 20 ? { bases: [base] } : { resources: [base] };
	fs.writeFileSync(path.join(dir, "kustomization.yaml"), YAML.stringify({
		apiVersion: "kustomize.config.k8s.io/v1beta1",
		kind: "Kustomization",
		...baseField,
		...fields(base),
	}));
	try {
		return kustomizeBuild(kubectl, env, YAML, dir);
	} finally {
		fs.rmSync(dir, { recursive: true, force: true });
	}
}

// ---------------------------------------------------------------- manifests/

const baseProblems = [];
const ds = daemonSetOf(kustomizeBuild(kubectl, env, YAML, manifestsDir), baseProblems);
check("kubectl kustomize manifests/ renders the DaemonSet alone", baseProblems);

if (ds) {
	const identity = [];
	expect(identity, "metadata.name", ds.metadata?.name, AGENT);
	expect(identity, "metadata.namespace", ds.metadata?.namespace, "kube-system");
	expect(identity, "spec.selector", ds.spec?.selector, SELECTOR);
	check("DaemonSet kube-system/ip-masq-agent with upstream's selector k8s-app: ip-masq-agent", identity);

	const labels = [];
	expect(labels, "metadata.labels", ds.metadata?.labels, LABELS);
	expect(labels, "spec.template.metadata.labels", ds.spec?.template?.metadata?.labels, LABELS);
	check("k8s-app and the app.kubernetes.io labels on the DaemonSet and its pod template", labels);

	const container = containerOf(ds);
	if (args.version) {
		const image = [];
		expect(image, "the agent's image", container?.image, `${IMAGE}:v${args.version}`);
		check(`the image is ${IMAGE}:v${args.version}, the project's version`, image);
	}

	const probes = [];
	for (const [name, endpoint] of [["readinessProbe", "/readyz"], ["livenessProbe", "/livez"]]) {
		expect(probes, `${name}.httpGet.path`, container?.[name]?.httpGet?.path, endpoint);
		expect(probes, `${name}'s port`, probePort(container, container?.[name]), HEALTH_PORT);
	}
	check(`probes: readiness on /readyz, liveness on /livez, both on port ${HEALTH_PORT}`, probes);

	const nodes = [];
	expect(nodes, "spec.template.spec.nodeSelector", ds.spec?.template?.spec?.nodeSelector, { "kubernetes.io/os": "linux" });
	check("by default every Linux node: the nodeSelector is kubernetes.io/os: linux alone", nodes);

	// docs/kubernetes.md, "The image": an overlay's images entry sets the image, and
	// changes nothing else.
	const overlay = [];
	const newImage = "registry.example/ip-masq-agent:test";
	const overlaid = daemonSetOf(renderOverlay("overlay-image", () => ({
		images: [{ name: IMAGE, newName: "registry.example/ip-masq-agent", newTag: "test" }],
	})), overlay);
	if (overlaid) {
		expect(overlay, "the image", containerOf(overlaid)?.image, newImage);
		const want = structuredClone(ds);
		containerOf(want).image = newImage;
		if (!same(overlaid, want))
			overlay.push(`the overlay changed more than the image:\n${json(overlaid)}`);
	}
	check("an overlay's images entry replaces the image and nothing else", overlay);

	// docs/kubernetes.md, "Only some nodes": the opt-in component adds the addon's
	// node label to the nodeSelector, keeps kubernetes.io/os, and changes nothing else.
	if (version.minor <= 20) {
		console.log(`# kubectl ${version.gitVersion} (kustomize ${version.kustomize}) has no components: ` +
			    "components/masq-agent-ds-ready is not rendered (docs/kubernetes.md: it needs kubectl 1.21 or later)");
	} else {
		const problems = [];
		const restricted = daemonSetOf(renderOverlay("overlay-component", (base) => ({
			components: [`${base}/components/masq-agent-ds-ready`],
		})), problems);
		if (restricted) {
			const nodeSelector = { "kubernetes.io/os": "linux", "node.kubernetes.io/masq-agent-ds-ready": "true" };
			expect(problems, "spec.template.spec.nodeSelector", restricted.spec?.template?.spec?.nodeSelector, nodeSelector);
			const want = structuredClone(ds);
			want.spec.template.spec.nodeSelector = nodeSelector;
			if (!same(restricted, want))
				problems.push(`the component changed more than the nodeSelector:\n${json(restricted)}`);
		}
		check("components/masq-agent-ds-ready: nodeSelector kubernetes.io/os: linux and " +
		      "node.kubernetes.io/masq-agent-ds-ready: \"true\", nothing else changed", problems);
	}
}

// ---------------------------------------------------------------- discovery components

// docs/kubernetes.md, "The pod network from the node": each discovery component adds its
// ConfigMap (the section), reads /etc/config as a directory of it and the user's
// ConfigMap, and mounts what the section reads from the node, read-only, at the same
// path; and nothing else. `mounts` are the hostPath directories, `key` the section's
// source (flannelSubnetEnv, cniConfDir, routeProtocols).
const DISCOVERY_COMPONENTS = [
	{ name: "discovery-flannel", mounts: ["/run/flannel"], key: "flannelSubnetEnv: /run/flannel/subnet.env" },
	{ name: "discovery-cni-conf", mounts: ["/etc/cni/net.d"], key: "cniConfDir: /etc/cni/net.d" },
	{ name: "discovery-bird-routes", mounts: [], key: "routeProtocols: [bird]" },
];

// What the DaemonSet must be with the component: the base, with --config-dir, a projected
// config volume of both ConfigMaps (the generated one by its hashed name), and the mounts.
function expectedWithDiscovery(ds, generatedName, mounts) {
	const want = structuredClone(ds);
	const spec = want.spec.template.spec;
	const container = containerOf(want);
	container.args = [...container.args, "--config-dir=/etc/config"];
	spec.volumes = spec.volumes.map((v) => v.name !== "config" ? v : {
		name: "config",
		projected: {
			sources: [
				{ configMap: { name: AGENT, optional: true, items: [{ key: "config", path: AGENT }] } },
				{ configMap: { name: generatedName, items: [{ key: "ip-masq-agent-discovery", path: "ip-masq-agent-discovery" }] } },
			],
		},
	});
	for (const mount of mounts) {
		spec.volumes.push({ name: DISCOVERY_VOLUMES[mount], hostPath: { path: mount, type: "DirectoryOrCreate" } });
		container.volumeMounts.push({ name: DISCOVERY_VOLUMES[mount], mountPath: mount, readOnly: true });
	}
	return want;
}
const DISCOVERY_VOLUMES = { "/run/flannel": "flannel-run", "/etc/cni/net.d": "cni-conf" };

// One component rendered in an overlay (optionally with more of the overlay's own
// fields): its DaemonSet and its ConfigMap, or the problems.
function renderDiscovery(component, problems, fields = () => ({})) {
	const built = renderOverlay(`overlay-${component.name}`, (base) => ({
		components: [`${base}/components/${component.name}`],
		...fields(base),
	}));
	if (built.error) {
		problems.push(built.error);
		return {};
	}
	const daemonSets = built.objects.filter((o) => o?.kind === "DaemonSet");
	const configMaps = built.objects.filter((o) => o?.kind === "ConfigMap");
	if (daemonSets.length !== 1 || configMaps.length !== 1 || built.objects.length !== 2)
		problems.push(`rendered ${json(built.objects.map((o) => `${o?.kind} ${o?.metadata?.name}`))}, expected the DaemonSet and one ConfigMap`);
	return { ds: daemonSets[0], cm: configMaps[0] };
}

function discoveryChecks(ds, component) {
	const problems = [];
	const { ds: rendered, cm } = renderDiscovery(component, problems);
	if (!rendered || !cm)
		return problems;
	expect(problems, "the ConfigMap's namespace", cm.metadata?.namespace, "kube-system");
	const name = cm.metadata?.name ?? "";
	if (!/^ip-masq-agent-discovery-[a-z0-9]+$/.test(name))
		problems.push(`the ConfigMap is named ${json(name)}, expected ip-masq-agent-discovery-HASH`);
	const section = cm.data?.["ip-masq-agent-discovery"] ?? "";
	if (!section.includes("nonMasqueradeDiscovery:") || !section.includes(component.key))
		problems.push(`the ConfigMap's key ip-masq-agent-discovery holds ${json(section)}, expected the section with ${component.key}`);
	// The mounts, spelled out (the comparison below says the same, but this names them).
	const container = containerOf(rendered);
	for (const mount of component.mounts) {
		const volumeMount = (container?.volumeMounts ?? []).find((m) => m.mountPath === mount);
		const volume = (rendered.spec?.template?.spec?.volumes ?? []).find((v) => v.name === volumeMount?.name);
		if (volumeMount?.readOnly !== true || volume?.hostPath?.path !== mount)
			problems.push(`${mount}: expected a read-only mount of the hostPath ${mount}, got ${json({ volumeMount, volume })}`);
	}
	const hostPaths = (rendered.spec?.template?.spec?.volumes ?? []).filter((v) => v.hostPath).map((v) => v.hostPath.path);
	expect(problems, "the hostPath volumes", hostPaths, component.mounts);
	const want = expectedWithDiscovery(ds, name, component.mounts);
	if (!same(rendered, want))
		problems.push(`the DaemonSet is not the base with --config-dir, the projected config volume and the mounts:\n${json(rendered)}\nexpected\n${json(want)}`);
	return problems;
}

if (ds && version.minor <= 20) {
	console.log(`# kubectl ${version.gitVersion} has no components: the discovery components are not rendered`);
} else if (ds) {
	for (const component of DISCOVERY_COMPONENTS)
		check(`components/${component.name}: its ConfigMap, --config-dir, the projected config volume` +
		      (component.mounts.length ? `, ${component.mounts.join(", ")} mounted read-only` : ", no mount") +
		      "; nothing else changed", discoveryChecks(ds, component));
	// docs/kubernetes.md: an overlay narrows `within` with a patch of the ConfigMap, whose
	// hashed name then changes (and the DaemonSet's reference with it: a rollout).
	const problems = [];
	const narrowed = "nonMasqueradeDiscovery:\n  within: [\"10.244.0.0/16\"]\n  flannelSubnetEnv: /run/flannel/subnet.env\n";
	const plain = renderDiscovery(DISCOVERY_COMPONENTS[0], problems);
	const patched = renderDiscovery(DISCOVERY_COMPONENTS[0], problems, () => ({
		patches: [{
			target: { kind: "ConfigMap", name: "ip-masq-agent-discovery" },
			patch: YAML.stringify([{ op: "replace", path: "/data/ip-masq-agent-discovery", value: narrowed }]),
		}],
	}));
	if (patched.cm && plain.cm) {
		expect(problems, "the patched section", patched.cm.data?.["ip-masq-agent-discovery"]?.trimEnd(), narrowed.trimEnd());
		if (patched.cm.metadata?.name === plain.cm.metadata?.name)
			problems.push("the patched ConfigMap kept its name: the DaemonSet would not roll out");
		const source = patched.ds?.spec?.template?.spec?.volumes?.find((v) => v.name === "config")?.projected?.sources?.[1];
		expect(problems, "the DaemonSet's reference", source?.configMap?.name, patched.cm.metadata?.name);
	}
	check("an overlay's patch of ip-masq-agent-discovery narrows within, and the DaemonSet follows its new name", problems);
}

// ---------------------------------------------------------------- the ConfigMap

// docs/kubernetes.md: `kubectl create configmap ip-masq-agent --from-file=config=FILE
// -n kube-system` makes the same ConfigMap data as configmap.yaml.
{
	const problems = [];
	const example = YAML.parse(fs.readFileSync(path.join(manifestsDir, "configmap.yaml"), "utf8"), { version: "1.1" });
	const file = path.join(args.work, "example-config.yaml");
	fs.writeFileSync(file, example?.data?.config ?? "");
	const run = spawnSync(kubectl, ["create", "configmap", AGENT, `--from-file=config=${file}`, "-n", "kube-system",
					"--dry-run=client", "-o", "yaml"], { encoding: "utf8", env, timeout: 60000 });
	if (run.status !== 0) {
		problems.push(`kubectl create configmap failed: ${(run.stderr || String(run.error)).trim()}`);
	} else {
		const created = YAML.parse(run.stdout, { version: "1.1" });
		expect(problems, "metadata.name", created?.metadata?.name, example?.metadata?.name);
		expect(problems, "metadata.namespace", created?.metadata?.namespace, example?.metadata?.namespace);
		expect(problems, "data", created?.data, example?.data);
	}
	check("kubectl create configmap --from-file=config=FILE makes configmap.yaml's name, namespace and data", problems);
}

console.log(`${passed} passed, ${failed} failed`);
process.exit(failed === 0 ? 0 : 1);
