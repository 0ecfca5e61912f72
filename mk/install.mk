# make install, make uninstall: a real GPU node
# On a real GPU node (README "On a real GPU node"): the Python package in its
# own venv under $(VGPU_HOME), the commands symlinked into $(BINDIR), the
# example config (as the config only where none exists), the systemd unit,
# and vgpu.ko's sources with dkms.conf under /usr/src/vgpu-<version>.
# install-unit (the unit and the docs its Documentation= names) and
# install-dkms (the DKMS sources) stage alone too: tests/vm/test_systemd_unit.py and
# tests/host/test_dkms.py install what they check that way.
# DESTDIR stages the whole tree (paths inside it are the final ones).
# PIP_INSTALL_ARGS passes options to pip (e.g. --no-index --find-links DIR).
PREFIX ?= /usr/local
BINDIR ?= $(PREFIX)/bin
SYSCONFDIR ?= /etc
VGPU_HOME ?= /opt/vgpu
UNITDIR ?= /etc/systemd/system
DOCDIR ?= $(PREFIX)/share/doc/vgpu
DKMSDIR ?= /usr/src
PIP_INSTALL_ARGS ?=
# the one version (pyproject.toml reads it from there too)
VGPU_VERSION := $(shell sed -n 's/^__version__ *= *"\(.*\)"/\1/p' vgpu/__init__.py)
VGPU_VENV := $(VGPU_HOME)/venv
VGPU_SRC := $(DKMSDIR)/vgpu-$(VGPU_VERSION)
# every console script of pyproject.toml's [project.scripts] (one list), but
# vgpu-runtime: that one is the C fast path, compiled below
VGPU_COMMANDS := $(filter-out vgpu-runtime,$(shell sed -n \
	'/^\[project\.scripts\]/,/^\[/s/^\([a-z][a-z-]*\) *=.*/\1/p' pyproject.toml))
VGPU_DOCS := README.md $(wildcard docs/*.md)
# systemctl only on the live system, not into a staging tree
LIVE_SYSTEMD := $(if $(DESTDIR),,$(wildcard /run/systemd/system))

.PHONY: install install-unit install-dkms uninstall
install: install-unit install-dkms
	@case "$(VGPU_HOME)" in /?*) ;; *) echo "install: VGPU_HOME must be an absolute path"; exit 1;; esac
	test -d $(DESTDIR)$(VGPU_VENV) || $(PYTHON) -m venv $(DESTDIR)$(VGPU_VENV)
	@# built from a copy, so that setuptools leaves no build/ or egg-info here
	tmp=$$(mktemp -d) && trap 'rm -rf "$$tmp"' EXIT && \
	cp -r pyproject.toml README.md vgpu "$$tmp"/ && rm -rf "$$tmp"/vgpu/__pycache__ && \
	$(DESTDIR)$(VGPU_VENV)/bin/python -m pip install -q --disable-pip-version-check \
		--no-warn-script-location --upgrade $(PIP_INSTALL_ARGS) "$$tmp"
	@# a staged venv names its staging path in scripts and activate: make it the final one
	$(if $(DESTDIR),grep -rlI -F -- '$(DESTDIR)$(VGPU_VENV)' $(DESTDIR)$(VGPU_VENV)/bin \
		$(DESTDIR)$(VGPU_VENV)/pyvenv.cfg | xargs -r sed -i 's|$(DESTDIR)$(VGPU_VENV)|$(VGPU_VENV)|g')
	@# the hook and the runtime wrapper run isolated whatever environment they
	@# are started with (-I: no PYTHONPATH, PYTHONWARNINGS, user site or working
	@# directory on sys.path); pip's console scripts start a plain python
	for c in vgpu-oci-hook:cli.hook vgpu-runtime:cli.runtime; do \
		f=$(DESTDIR)$(VGPU_VENV)/bin/$${c%%:*}; \
		printf '#!%s -I\nimport sys\nfrom vgpu.%s import main\nsys.exit(main())\n' \
			'$(VGPU_VENV)/bin/python' "$${c#*:}" > $$f && chmod 0755 $$f || exit 1; \
	done
	install -d $(DESTDIR)$(BINDIR)
	for c in $(VGPU_COMMANDS); do ln -sfn $(VGPU_VENV)/bin/$$c $(DESTDIR)$(BINDIR)/$$c; done
	@# vgpu-runtime: the C fast path, which execs runc, or for a bundle that may
	@# ask for a slice vgpu-runtime-slow: this venv's Python, isolated and
	@# without the site import (-IS), with the package's directory named
	site=$$($(DESTDIR)$(VGPU_VENV)/bin/python -c 'import sysconfig; print(sysconfig.get_path("purelib"))') && \
	site=$${site#$(DESTDIR)} && \
	printf '#!%s -IS\nimport sys\nsys.path.insert(0, %s)\nfrom vgpu.cli.runtime import main\nsys.exit(main())\n' \
		'$(VGPU_VENV)/bin/python' "'$$site'" > $(DESTDIR)$(VGPU_SLOW_PATH) && \
		chmod 0755 $(DESTDIR)$(VGPU_SLOW_PATH)
	rm -f $(DESTDIR)$(BINDIR)/vgpu-runtime
	$(CC) $(RUNTIME_CFLAGS) -DVGPU_SLOW_PATH='"$(VGPU_SLOW_PATH)"' \
		-o $(DESTDIR)$(BINDIR)/vgpu-runtime container-hook/vgpu-runtime.c
	install -d $(DESTDIR)$(VGPU_HOME)/share $(DESTDIR)$(SYSCONFDIR)/vgpu
	install -m 0644 config/vgpud.example.toml $(DESTDIR)$(VGPU_HOME)/share/vgpud.example.toml
	@if [ -e $(DESTDIR)$(SYSCONFDIR)/vgpu/vgpud.toml ]; then \
		echo "install: kept the existing $(SYSCONFDIR)/vgpu/vgpud.toml"; \
	else install -m 0644 config/vgpud.example.toml $(DESTDIR)$(SYSCONFDIR)/vgpu/vgpud.toml; fi
	@echo "install: done.  Next: dkms install vgpu/$(VGPU_VERSION); edit $(SYSCONFDIR)/vgpu/vgpud.toml;"
	@echo "         systemctl enable --now vgpud"

# the unit names its commands in /usr/bin and its docs in /usr/share/doc/vgpu:
# both are rewritten to where they are installed
install-unit:
	install -d $(DESTDIR)$(DOCDIR)
	install -m 0644 $(VGPU_DOCS) $(DESTDIR)$(DOCDIR)/
	install -d $(DESTDIR)$(UNITDIR)
	sed -E -e 's#(/usr/local/bin|/usr/bin)/(vgpud|vgpuctl|vgpu-oci-hook)([[:space:]]|$$)#$(BINDIR)/\2\3#g' \
		-e 's#file:///usr/share/doc/vgpu/#file://$(DOCDIR)/#g' \
		deploy/systemd/vgpud.service > $(DESTDIR)$(UNITDIR)/vgpud.service
	chmod 0644 $(DESTDIR)$(UNITDIR)/vgpud.service
	$(if $(LIVE_SYSTEMD),-systemctl daemon-reload)

install-dkms:
	rm -rf $(DESTDIR)$(VGPU_SRC)
	install -d $(DESTDIR)$(VGPU_SRC)/vgpu $(DESTDIR)$(VGPU_SRC)/include/uapi
	install -m 0644 kmod/vgpu/Kbuild $(filter-out %.mod.c,$(wildcard kmod/vgpu/*.c)) \
		kmod/vgpu/*.h $(DESTDIR)$(VGPU_SRC)/vgpu/
	install -m 0644 kmod/include/nvabi.h kmod/include/nvrel.h kmod/include/nvrel_tables.h $(DESTDIR)$(VGPU_SRC)/include/
	install -m 0644 kmod/include/uapi/*.h $(DESTDIR)$(VGPU_SRC)/include/uapi/
	install -m 0755 kmod/dkms-build.sh kmod/nvidia-symvers.sh $(DESTDIR)$(VGPU_SRC)/
	sed 's/@VERSION@/$(VGPU_VERSION)/' kmod/dkms.conf > $(DESTDIR)$(VGPU_SRC)/dkms.conf

uninstall:
	@case "$(VGPU_HOME)" in /?*) ;; *) echo "uninstall: VGPU_HOME must be an absolute path"; exit 1;; esac
	$(if $(LIVE_SYSTEMD),-systemctl disable --now vgpud 2>/dev/null)
	rm -f $(DESTDIR)$(UNITDIR)/vgpud.service
	$(if $(LIVE_SYSTEMD),-systemctl daemon-reload)
	for c in $(VGPU_COMMANDS); do l=$(DESTDIR)$(BINDIR)/$$c; \
		case "$$(readlink $$l 2>/dev/null)" in $(VGPU_VENV)/*) rm -f $$l;; esac; done
	-grep -qsF '$(VGPU_SLOW_PATH)' $(DESTDIR)$(BINDIR)/vgpu-runtime && rm -f $(DESTDIR)$(BINDIR)/vgpu-runtime
	$(if $(DESTDIR),,-if command -v dkms >/dev/null && dkms status vgpu/$(VGPU_VERSION) | grep -q .; \
		then dkms remove vgpu/$(VGPU_VERSION) --all; fi)
	rm -rf $(DESTDIR)$(VGPU_SRC) $(DESTDIR)$(VGPU_VENV) $(DESTDIR)$(DOCDIR)
	rm -f $(DESTDIR)$(VGPU_HOME)/share/vgpud.example.toml
	-rmdir $(DESTDIR)$(VGPU_HOME)/share $(DESTDIR)$(VGPU_HOME) 2>/dev/null
	@echo "uninstall: kept $(SYSCONFDIR)/vgpu (the config) and vgpud's state directory"
