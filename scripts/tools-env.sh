# Source this to use the tools from scripts/bootstrap-tools.sh: `source scripts/tools-env.sh`.
_ectr_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
export PATH="$_ectr_root/.tools/bin:$_ectr_root/.venv/bin:$PATH"
export HELM_PLUGINS="$_ectr_root/.tools/helm-plugins"
# Keep helm's config and cache inside the checkout so tests never touch ~/.config/helm.
export HELM_CONFIG_HOME="$_ectr_root/.tools/helm-config"
export HELM_CACHE_HOME="$_ectr_root/.tools/helm-cache"
export HELM_DATA_HOME="$_ectr_root/.tools/helm-data"
unset _ectr_root
