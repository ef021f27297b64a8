# Checks of deploy/ (operators' configuration), included from tests/CMakeLists.txt. Label `check`:
# they run none of Tandem's code (the sanitizer suites leave them out), but for
# grafana_dashboard_queries_live, which runs the stack.
# Prometheus: config, rules and the rules' unit tests (promtool, Debian's prometheus package).
set(TANDEM_DEPLOY ${PROJECT_SOURCE_DIR}/deploy)
# Without promtool these skip (tandem_add_test_needing, tests/CMakeLists.txt).
tandem_add_test_needing(TANDEM_PROMTOOL prometheus_config_check
  ${TANDEM_PROMTOOL} check config ${TANDEM_DEPLOY}/prometheus/prometheus.yml)
tandem_add_test_needing(TANDEM_PROMTOOL prometheus_rules_check
  ${TANDEM_PROMTOOL} check rules ${TANDEM_DEPLOY}/prometheus/rules/tandem-recording.yml
    ${TANDEM_DEPLOY}/prometheus/rules/tandem-alerts.yml)
tandem_add_test_needing(TANDEM_PROMTOOL prometheus_rules_test
  ${TANDEM_PROMTOOL} test rules ${TANDEM_DEPLOY}/prometheus/tests/tandem-alerts.test.yml)
# Every tandem_* metric named under deploy/ is exported by the binaries or recorded by a rule.
add_test(NAME prometheus_metric_names_check
  COMMAND ${Python3_EXECUTABLE} ${TANDEM_DEPLOY}/prometheus/check_metric_names.py)
set_tests_properties(prometheus_config_check prometheus_rules_check prometheus_rules_test
  prometheus_metric_names_check PROPERTIES LABELS check TIMEOUT 60)

# Grafana: dashboard structure (Grafana itself is not packaged for Debian), then every panel
# query against a real Prometheus that scraped a live stack under load.
add_test(NAME grafana_dashboards_check
  COMMAND ${Python3_EXECUTABLE} ${TANDEM_DEPLOY}/grafana/check_dashboards.py)
set_tests_properties(grafana_dashboards_check PROPERTIES LABELS check TIMEOUT 60)
# A sanitizer build's stack may miss the latency SLOs (over 1 s to a first token under TSan on a
# loaded machine): there, and only there, an SLO alert may be pending where requests missed it.
set(TANDEM_DASHBOARD_TEST_SLO_FLAG "")
if(TANDEM_SANITIZE)
  set(TANDEM_DASHBOARD_TEST_SLO_FLAG --allow_slo_misses)
endif()
tandem_add_test_needing(TANDEM_PROMETHEUS grafana_dashboard_queries_live
  ${Python3_EXECUTABLE} ${TANDEM_DEPLOY}/grafana/dashboard_queries_test.py
    --worker=$<TARGET_FILE:tandem-worker> --gateway=$<TARGET_FILE:tandem-gateway>
    --ctl=$<TARGET_FILE:tandemctl> --prometheus=${TANDEM_PROMETHEUS}
    ${TANDEM_DASHBOARD_TEST_SLO_FLAG})
# COST: started early in a fresh build tree (tandem_test in tests/CMakeLists.txt says why).
set_tests_properties(grafana_dashboard_queries_live PROPERTIES LABELS integration TIMEOUT 120
  COST 15)

# systemd: install.sh refuses to install workers without a chosen engine (--checkpoint-dir or
# --engine=synthetic; the binary's default is the load simulator) and writes nothing then; runs
# with stub binaries into a scratch root, so it needs neither a build nor systemd.
add_test(NAME systemd_install_engine_check
  COMMAND bash ${TANDEM_DEPLOY}/systemd/install_engine_test.sh)
set_tests_properties(systemd_install_engine_check PROPERTIES LABELS check TIMEOUT 60)
# install.sh into a scratch root, then `systemd-analyze verify` every unit (the worker
# template as three GPU instances). Needs the built binaries (the units' ExecStart).
find_program(TANDEM_SYSTEMD_ANALYZE systemd-analyze)
if(TANDEM_SYSTEMD_ANALYZE)
  # verify_units.sh also runs promtool on the installed Prometheus config.
  tandem_add_test_needing(TANDEM_PROMTOOL systemd_units_verify
    bash ${TANDEM_DEPLOY}/systemd/verify_units.sh ${CMAKE_BINARY_DIR})
  set_tests_properties(systemd_units_verify PROPERTIES LABELS check TIMEOUT 60)
else()
  message(STATUS "systemd-analyze not found: systemd_units_verify skipped")
endif()

# docker-compose: `docker-compose config` (Debian's docker-compose) plus consistency checks, among
# them that it refuses without TANDEM_ENGINE. No container engine on the build machine: the images
# are not built here.
find_program(TANDEM_DOCKER_COMPOSE docker-compose)
if(TANDEM_DOCKER_COMPOSE)
  tandem_add_test_needing(TANDEM_PROMTOOL compose_config_check
    ${Python3_EXECUTABLE} ${TANDEM_DEPLOY}/compose/check_compose.py
      ${TANDEM_DOCKER_COMPOSE} ${TANDEM_PROMTOOL})
  set_tests_properties(compose_config_check PROPERTIES LABELS check TIMEOUT 60)
else()
  message(STATUS "docker-compose not found: compose_config_check skipped (scripts/setup.sh installs it)")
endif()

# Kubernetes: render every overlay with `kubectl kustomize` and check the objects (among them the
# gateway's headless Service, the workers' explicit engine, and ../cert-manager added to the
# overlays: the gateway certificate names every Service DNS name in the rendered namespace).
# Works with kubectl 1.20 (Debian 12's kubernetes-client, kustomize v2.0.3) and later.
find_program(TANDEM_KUBECTL kubectl)
if(TANDEM_KUBECTL)
  add_test(NAME k8s_manifests_check
    COMMAND ${Python3_EXECUTABLE} ${TANDEM_DEPLOY}/k8s/check_manifests.py ${TANDEM_KUBECTL})
  set_tests_properties(k8s_manifests_check PROPERTIES LABELS check TIMEOUT 60)
else()
  message(STATUS "kubectl not found: k8s_manifests_check skipped (scripts/setup.sh installs it)")
endif()
