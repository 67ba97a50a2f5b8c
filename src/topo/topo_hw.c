/* This host's hardware through hwloc: CPU counts, GPUs and NICs with their
 * PCI address and NUMA/package locality, and the PCI path between each GPU
 * and NIC.  Informative (logs, dumps) except for the NIC count, which sets
 * the number of rails when MOECCL_TOPO_RAILS does not.  Runs once per
 * process: the hardware does not change under a running job, and every
 * communicator creation asks.  Missing sysfs entries (containers) only mean
 * fewer devices. */
#include "topo/topo.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#ifdef MOECCL_HAVE_HWLOC
#include <hwloc.h>
/* Written against the hwloc 2.x object model (I/O type filters, OS device
 * types); other major versions report "not supported" instead. */
#if HWLOC_API_VERSION >= 0x00020000 && HWLOC_API_VERSION < 0x00030000
#define USE_HWLOC 1
#endif
#endif

/* What discovery found, shared by every later call. */
static struct {
  pthread_once_t once;
  char summary[sizeof(((moeccl_topo_t*)0)->hw)];
  char details[16384]; /* lines, each ending in '\n', without the "# hw " prefix */
  int rails;           /* NICs that count as rails */
} hw_cache = {PTHREAD_ONCE_INIT, "", "", 0};

#ifdef USE_HWLOC

/* Bounded text: appends never overflow; a cut line ends with "...". */
typedef struct {
  char* buf;
  size_t size, used;
} text_t;

static void __attribute__((format(printf, 2, 3))) text_add(text_t* t, const char* fmt, ...) {
  if (t->used + 1 >= t->size) return;
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(t->buf + t->used, t->size - t->used, fmt, ap);
  va_end(ap);
  if (n < 0) return;
  if ((size_t)n < t->size - t->used) {
    t->used += (size_t)n;
    return;
  }
  t->used = t->size - 1;
  if (t->size > 4) memcpy(t->buf + t->size - 4, "...", 4);
}

#define MAX_DEVICES 64

typedef struct {
  hwloc_obj_t pci;    /* its PCI device, or NULL (an OS device hwloc found elsewhere) */
  hwloc_obj_t anchor; /* where its PCI path starts: pci, else the OS device */
  char names[64];     /* its OS devices, '/'-separated: "mlx5_0/ib0", "cuda0" */
  int rdma;           /* has an OpenFabrics (verbs) device */
} hw_device_t;

typedef struct {
  hw_device_t gpu[MAX_DEVICES], nic[MAX_DEVICES];
  int ngpus, nnics, nrdma;
  int packages, numas, cores, pus;
} hw_found_t;

/* GPUs by PCI class: 3D controllers (compute GPUs) of any vendor; display
 * controllers and processing accelerators of the GPU vendors (NVIDIA, AMD,
 * Intel), so that a server's BMC display (ASPEED, Matrox) is not a GPU. */
static int pci_is_gpu(hwloc_obj_t obj) {
  unsigned cls = obj->attr->pcidev.class_id, vendor = obj->attr->pcidev.vendor_id;
  if (cls == 0x0302) return 1;
  if ((cls >> 8) != 0x03 && (cls >> 8) != 0x12) return 0;
  return vendor == 0x10de || vendor == 0x1002 || vendor == 0x8086;
}

static hwloc_obj_t pci_ancestor(hwloc_obj_t obj) {
  while (obj && obj->type != HWLOC_OBJ_PCI_DEVICE) obj = obj->parent;
  return obj;
}

/* The entry of list for PCI device pci (NULL: always a new one), or NULL when full. */
static hw_device_t* device_entry(hw_device_t* list, int* n, hwloc_obj_t pci, hwloc_obj_t anchor) {
  for (int i = 0; pci && i < *n; i++)
    if (list[i].pci == pci) return &list[i];
  if (*n == MAX_DEVICES) return NULL;
  hw_device_t* d = &list[(*n)++];
  memset(d, 0, sizeof(*d));
  d->pci = pci;
  d->anchor = pci ? pci : anchor;
  return d;
}

static void add_name(hw_device_t* d, const char* name) {
  if (!name || !*name) return;
  size_t used = strlen(d->names);
  snprintf(d->names + used, sizeof(d->names) - used, "%s%s", used ? "/" : "", name);
}

static void find_gpus_by_class(hwloc_topology_t topo, hw_found_t* hw) {
  for (hwloc_obj_t obj = hwloc_get_next_pcidev(topo, NULL); obj;
       obj = hwloc_get_next_pcidev(topo, obj))
    if (pci_is_gpu(obj)) device_entry(hw->gpu, &hw->ngpus, obj, obj);
}

/* Names the GPUs found by class; a compute device (CUDA, OpenCL, ...) on
 * some other PCI device is a GPU too.  A DRM card on a non-GPU is not. */
static void add_gpu_osdev(hw_found_t* hw, hwloc_obj_t osdev) {
  hwloc_obj_t pci = pci_ancestor(osdev);
  hw_device_t* d = NULL;
  for (int i = 0; pci && i < hw->ngpus && !d; i++)
    if (hw->gpu[i].pci == pci) d = &hw->gpu[i];
  if (!d && osdev->attr->osdev.type == HWLOC_OBJ_OSDEV_COPROC)
    d = device_entry(hw->gpu, &hw->ngpus, pci, osdev);
  if (d) add_name(d, osdev->name);
}

static void add_nic_osdev(hw_found_t* hw, hwloc_obj_t osdev) {
  if (osdev->name && !strcmp(osdev->name, "lo")) return;
  hw_device_t* d = device_entry(hw->nic, &hw->nnics, pci_ancestor(osdev), osdev);
  if (!d) return;
  add_name(d, osdev->name);
  if (osdev->attr->osdev.type == HWLOC_OBJ_OSDEV_OPENFABRICS && !d->rdma) {
    d->rdma = 1;
    hw->nrdma++;
  }
}

static void find_devices(hwloc_topology_t topo, hw_found_t* hw) {
  find_gpus_by_class(topo, hw);
  for (hwloc_obj_t obj = hwloc_get_next_osdev(topo, NULL); obj;
       obj = hwloc_get_next_osdev(topo, obj)) {
    switch (obj->attr->osdev.type) {
      case HWLOC_OBJ_OSDEV_GPU:
      case HWLOC_OBJ_OSDEV_COPROC: add_gpu_osdev(hw, obj); break;
      case HWLOC_OBJ_OSDEV_NETWORK:
      case HWLOC_OBJ_OSDEV_OPENFABRICS: add_nic_osdev(hw, obj); break;
      default: break;
    }
  }
}

static int count_of(hwloc_topology_t topo, hwloc_obj_type_t type) {
  int n = hwloc_get_nbobjs_by_type(topo, type);
  return n > 0 ? n : 0;
}

/* "0000:17:00.0", or "-" for a device hwloc found outside PCI. */
static void pci_address(const hw_device_t* d, char* buf, size_t len) {
  if (!d->pci) {
    snprintf(buf, len, "-");
    return;
  }
  const struct hwloc_pcidev_attr_s* a = &d->pci->attr->pcidev;
  snprintf(buf, len, "%04x:%02x:%02x.%x", (unsigned)a->domain, (unsigned)a->bus, (unsigned)a->dev,
           (unsigned)a->func);
}

/* NUMA nodes (OS numbers, "0" or "0-1" when hwloc cannot tell) and package
 * of the CPU-side object the device hangs from. */
static void locality(hwloc_topology_t topo, const hw_device_t* d, char* numa, size_t len,
                     int* package) {
  hwloc_obj_t cpu_side = hwloc_get_non_io_ancestor_obj(topo, d->anchor);
  snprintf(numa, len, "?");
  *package = -1;
  if (!cpu_side) return;
  if (cpu_side->nodeset && !hwloc_bitmap_iszero(cpu_side->nodeset))
    hwloc_bitmap_list_snprintf(numa, len, cpu_side->nodeset);
  for (hwloc_obj_t o = cpu_side; o; o = o->parent)
    if (o->type == HWLOC_OBJ_PACKAGE) {
      *package = (int)o->os_index;
      break;
    }
}

/* The closest object above (or equal to) both a and b.  hwloc's
 * hwloc_get_common_ancestor_obj compares depths, which I/O objects do not
 * have (their depths are special negative values): it is for CPU-side
 * objects only. */
static hwloc_obj_t common_ancestor(hwloc_obj_t a, hwloc_obj_t b) {
  for (hwloc_obj_t x = a; x; x = x->parent)
    for (hwloc_obj_t y = b; y; y = y->parent)
      if (x == y) return x;
  return NULL;
}

/* The PCI path between two devices, named like NCCL's path types: PIX (one
 * PCIe switch: at most 3 bridges), PXB (more bridges, no host bridge), PHB
 * (through a host bridge), NODE (between host bridges of one NUMA node),
 * SYS (across NUMA nodes); *bridges counts the bridges crossed. */
static const char* pci_path(hwloc_obj_t a, hwloc_obj_t b, int* bridges) {
  *bridges = 0;
  hwloc_obj_t common = common_ancestor(a, b);
  if (!common) return "?";
  for (hwloc_obj_t o = a->parent; o && o != common; o = o->parent)
    *bridges += o->type == HWLOC_OBJ_BRIDGE;
  for (hwloc_obj_t o = b->parent; o && o != common; o = o->parent)
    *bridges += o->type == HWLOC_OBJ_BRIDGE;
  if (common->type == HWLOC_OBJ_BRIDGE) {
    (*bridges)++;
    if (common->attr->bridge.upstream_type == HWLOC_OBJ_BRIDGE_HOST) return "PHB";
    return *bridges <= 3 ? "PIX" : "PXB";
  }
  if (common->type == HWLOC_OBJ_PCI_DEVICE || common->type == HWLOC_OBJ_OS_DEVICE) return "PIX";
  int same_numa = common->nodeset && hwloc_bitmap_weight(common->nodeset) == 1;
  return same_numa ? "NODE" : "SYS";
}

static const char* plural(int n) { return n == 1 ? "" : "s"; }

static void put_summary(hwloc_topology_t topo, const hw_found_t* hw, text_t* s) {
  text_add(s, "%d package%s, %d NUMA node%s, %d core%s, %d PU%s, %d GPU%s, %d NIC%s", hw->packages,
           plural(hw->packages), hw->numas, plural(hw->numas), hw->cores, plural(hw->cores),
           hw->pus, plural(hw->pus), hw->ngpus, plural(hw->ngpus), hw->nnics, plural(hw->nnics));
  if (hw->nrdma && hw->nrdma < hw->nnics) text_add(s, " (%d RDMA)", hw->nrdma);
  for (int i = 0; i < hw->nnics; i++) {
    char pci[32], numa[32];
    int package;
    pci_address(&hw->nic[i], pci, sizeof(pci));
    locality(topo, &hw->nic[i], numa, sizeof(numa), &package);
    text_add(s, "%s %s (pci %s, NUMA %s)", i ? "," : ":", hw->nic[i].names, pci, numa);
  }
}

static void put_device(hwloc_topology_t topo, const char* kind, int i, const hw_device_t* d,
                       text_t* s) {
  char pci[32], numa[32];
  int package;
  pci_address(d, pci, sizeof(pci));
  locality(topo, d, numa, sizeof(numa), &package);
  text_add(s, "%s %d: %s pci %s", kind, i, d->names[0] ? d->names : "(no OS device)", pci);
  if (d->pci)
    text_add(s, " [%04x:%04x class %04x]", (unsigned)d->pci->attr->pcidev.vendor_id,
             (unsigned)d->pci->attr->pcidev.device_id, (unsigned)d->pci->attr->pcidev.class_id);
  if (d->pci && d->pci->attr->pcidev.linkspeed > 0) { /* in tenths: no locale's decimal comma */
    unsigned tenths = (unsigned)(d->pci->attr->pcidev.linkspeed * 10.0f + 0.5f);
    text_add(s, " link %u.%u GB/s", tenths / 10, tenths % 10);
  }
  if (package >= 0) text_add(s, " NUMA %s package %d", numa, package);
  else text_add(s, " NUMA %s package -", numa);
  text_add(s, "%s\n", d->rdma ? " rdma" : "");
}

static void put_details(hwloc_topology_t topo, const hw_found_t* hw, text_t* s) {
  char host[64] = "?";
  if (gethostname(host, sizeof(host) - 1) != 0) snprintf(host, sizeof(host), "?");
  unsigned api = hwloc_get_api_version();
  text_add(s, "host %s, hwloc API %u.%u.%u\n", host, api >> 16, (api >> 8) & 0xff, api & 0xff);
  text_add(s, "cpu: %d package%s, %d NUMA node%s, %d core%s, %d PU%s (allowed to this process)\n",
           hw->packages, plural(hw->packages), hw->numas, plural(hw->numas), hw->cores,
           plural(hw->cores), hw->pus, plural(hw->pus));
  for (int i = 0; i < hw->ngpus; i++) put_device(topo, "gpu", i, &hw->gpu[i], s);
  for (int i = 0; i < hw->nnics; i++) put_device(topo, "nic", i, &hw->nic[i], s);
  for (int g = 0; g < hw->ngpus && hw->nnics; g++) {
    text_add(s, "gpu %d to nic 0..%d:", g, hw->nnics - 1);
    for (int n = 0; n < hw->nnics; n++) {
      int bridges;
      const char* path = pci_path(hw->gpu[g].anchor, hw->nic[n].anchor, &bridges);
      text_add(s, " %s(%d)", path, bridges);
    }
    text_add(s, "\n");
  }
}

/* Discovery components left out.  The GPU runtimes' ones (CUDA, NVML, ROCm
 * SMI, Level Zero, OpenCL) would initialise every GPU of the node from every
 * rank, which costs seconds and device memory; GPUs are found by PCI class
 * instead.  OpenGL's would contact X servers.  On Linux hwloc reads PCI from
 * sysfs itself, so libpciaccess's component adds nothing (and keeps its
 * pci.ids strings past the topology's end). */
static const char* const skipped_components[] = {
    "cuda", "nvml", "rsmi", "levelzero", "opencl", "gl",
#ifdef __linux__
    "pci",
#endif
};

static void skip_components(hwloc_topology_t topo) {
#if HWLOC_API_VERSION >= 0x00020100
  for (size_t i = 0; i < sizeof(skipped_components) / sizeof(skipped_components[0]); i++)
    hwloc_topology_set_components(topo, HWLOC_TOPOLOGY_COMPONENTS_FLAG_BLACKLIST,
                                  skipped_components[i]);
#else
  (void)topo;
  (void)skipped_components;
#endif
}

static void discover(void) {
  text_t summary = {hw_cache.summary, sizeof(hw_cache.summary), 0};
  text_t details = {hw_cache.details, sizeof(hw_cache.details), 0};
  hwloc_topology_t topo;
  if (hwloc_topology_init(&topo) != 0) {
    text_add(&summary, "hwloc: cannot initialise");
    return;
  }
  hwloc_topology_set_io_types_filter(topo, HWLOC_TYPE_FILTER_KEEP_IMPORTANT);
  skip_components(topo);
  if (hwloc_topology_load(topo) != 0) {
    text_add(&summary, "hwloc: cannot load this host's topology");
    hwloc_topology_destroy(topo);
    return;
  }
  static hw_found_t hw; /* 10 KB; discover runs once */
  memset(&hw, 0, sizeof(hw));
  hw.packages = count_of(topo, HWLOC_OBJ_PACKAGE);
  hw.numas = count_of(topo, HWLOC_OBJ_NUMANODE);
  hw.cores = count_of(topo, HWLOC_OBJ_CORE);
  hw.pus = count_of(topo, HWLOC_OBJ_PU);
  find_devices(topo, &hw);
  put_summary(topo, &hw, &summary);
  put_details(topo, &hw, &details);
  hw_cache.rails = hw.nrdma ? hw.nrdma : hw.nnics;
  hwloc_topology_destroy(topo);
}

#else /* no usable hwloc */

static void discover(void) {
#ifdef MOECCL_HAVE_HWLOC
  snprintf(hw_cache.summary, sizeof(hw_cache.summary), "hwloc API %#x not supported (2.x needed)",
           (unsigned)HWLOC_API_VERSION);
#else
  snprintf(hw_cache.summary, sizeof(hw_cache.summary), "hwloc not available");
#endif
  snprintf(hw_cache.details, sizeof(hw_cache.details), "%s\n", hw_cache.summary);
}

#endif

int moeccl_topo_discover_hw(moeccl_topo_t* t) {
  pthread_once(&hw_cache.once, discover);
  if (t) snprintf(t->hw, sizeof(t->hw), "%s", hw_cache.summary);
  return hw_cache.rails;
}

int moeccl_topo_dump_hw(FILE* f, const char* summary) {
  if (!f || (summary && !*summary)) return 0;
  pthread_once(&hw_cache.once, discover);
  if (summary && strcmp(summary, hw_cache.summary) != 0) return 0;
  int lines = 0;
  for (const char* line = hw_cache.details; *line; lines++) {
    size_t n = strcspn(line, "\n");
    fprintf(f, "# hw %.*s\n", (int)n, line);
    line += n + (line[n] == '\n');
  }
  return lines;
}
