//! The usability probe of a stored kubeconfig (parity §6.7 step 9): is it rejected outright by
//! the workload API server?

use super::PROBE_TIMEOUT;

/// Whether the stored kubeconfig is rejected outright by the workload API server. The stored
/// Secret may have been adopted or edited by anyone who can write Secrets, so its kubeconfig is
/// checked like any other ([`crate::kubeconfig`]): one that asks for a command or a file is
/// never used, only replaced.
///
/// Only a verdict is logged above `debug`: an unusable kubeconfig is replaced (`info`); a probe
/// that cannot reach the server or times out keeps the stored kubeconfig and is retried at the
/// next reconcile, so it is no failure (`debug`).
pub(super) async fn probe_rejects(kubeconfig: &[u8]) -> bool {
    let client = match crate::workload::client_from_kubeconfig(kubeconfig).await {
        Ok(c) => c,
        Err(err) => {
            tracing::info!(error = %err, "stored kubeconfig is unusable; exporting a new one");
            return true;
        }
    };
    match tokio::time::timeout(PROBE_TIMEOUT, client.apiserver_version()).await {
        Ok(Err(kube::Error::Api(s))) if s.code == 401 || s.code == 403 => {
            tracing::info!(
                code = s.code,
                "the workload API server refuses the stored kubeconfig; exporting a new one"
            );
            true
        }
        Ok(Err(err)) => {
            tracing::debug!(error = %err, "kubeconfig probe inconclusive; keeping the stored kubeconfig");
            false
        }
        Err(_) => {
            tracing::debug!("kubeconfig probe timed out; keeping the stored kubeconfig");
            false
        }
        Ok(Ok(_)) => false,
    }
}
