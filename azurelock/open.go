package azurelock

import (
	"context"
	"errors"
	"fmt"
	"os"

	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob"

	"github.com/dlockgo/dlock"
	"github.com/dlockgo/dlock/driver"
	"github.com/dlockgo/dlock/internal/objlock"
)

func init() {
	dlock.Register("azblob", open)
}

// The environment variables open takes credentials from, as the Azure
// CLI and SDKs name them.
const (
	envConnectionString = "AZURE_STORAGE_CONNECTION_STRING"
	envAccount          = "AZURE_STORAGE_ACCOUNT"
	envKey              = "AZURE_STORAGE_KEY"
)

// open is the Opener of azblob:// URLs; see the package documentation for
// their form and parameters. Credentials come from the environment,
// never from the URL.
func open(ctx context.Context, u driver.URL) (driver.Driver, error) {
	if u.Host == "" {
		return nil, u.Err("container", "", errors.New("an azblob URL names its container as host: azblob://container/prefix"))
	}
	if u.User != nil {
		return nil, u.Err("user", u.User.Username(), errors.New("credentials come from "+envConnectionString+", or "+envAccount+" and "+envKey+", not the URL"))
	}
	prefix, endpoint, probe, err := objlock.URL(u)
	if err != nil {
		return nil, err
	}
	if endpoint != "" && os.Getenv(envConnectionString) != "" {
		return nil, u.Err("endpoint", endpoint, errors.New(envConnectionString+" is set, and its BlobEndpoint names the service"))
	}
	account := u.String("account", os.Getenv(envAccount))
	if err := u.Unknown(); err != nil {
		return nil, err
	}
	client, err := newClient(account, endpoint)
	if err != nil {
		return nil, fmt.Errorf("azurelock: open %s: %w", u.Redacted(), err)
	}
	d, err := NewDriver(ctx, client, u.Host, &Options{Prefix: prefix, NoProbe: !probe})
	if err != nil {
		return nil, fmt.Errorf("azurelock: open %s: %w", u.Redacted(), err)
	}
	return d, nil
}

// newClient returns a client with the credentials of the environment: a
// connection string, or an account name and key. endpoint, if not empty,
// is the service URL; by default it is the connection string's, or the
// account's in the public cloud.
func newClient(account, endpoint string) (*azblob.Client, error) {
	if cs := os.Getenv(envConnectionString); cs != "" {
		return azblob.NewClientFromConnectionString(cs, nil)
	}
	key := os.Getenv(envKey)
	if account == "" || key == "" {
		return nil, errors.New("no credentials: set " + envConnectionString + ", or " + envAccount + " (or account=) and " + envKey)
	}
	cred, err := azblob.NewSharedKeyCredential(account, key)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", envKey, err)
	}
	if endpoint == "" {
		endpoint = "https://" + account + ".blob.core.windows.net/"
	}
	return azblob.NewClientWithSharedKeyCredential(endpoint, cred, nil)
}
